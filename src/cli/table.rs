//! Plain text tables for the admin subcommands: a header, aligned columns, no borders.

pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// Cells longer than this are cut (with `…`) so one long value cannot wreck the layout.
const MAX_CELL: usize = 60;

impl Table {
    pub fn new(head: &[&str]) -> Table {
        Table {
            head: head.iter().map(|h| h.to_uppercase()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        let cells = cells
            .into_iter()
            .map(|c| {
                let c = c.replace(['\n', '\r', '\t'], " ");
                if c.chars().count() > MAX_CELL {
                    let cut: String = c.chars().take(MAX_CELL - 1).collect();
                    format!("{cut}…")
                } else {
                    c
                }
            })
            .collect();
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.head.len();
        let mut width: Vec<usize> = self.head.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate().take(cols) {
                if i + 1 == cols {
                    l.push_str(c);
                } else {
                    l.push_str(c);
                    l.push_str(&" ".repeat(width[i] - c.chars().count() + 2));
                }
            }
            out.push_str(l.trim_end());
            out.push('\n');
        };
        line(&self.head);
        for r in &self.rows {
            line(r);
        }
        out
    }

    pub fn print(&self) {
        if self.rows.is_empty() {
            println!("(none)");
        } else {
            print!("{}", self.render());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_and_long_cells_are_cut() {
        let mut t = Table::new(&["name", "n"]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["longer".into(), "22".into()]);
        t.row(vec!["x".repeat(100), "3".into()]);
        let out = t.render();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], format!("NAME{}N", " ".repeat(58)));
        assert_eq!(lines[1], format!("a{}1", " ".repeat(61)));
        assert!(lines[3].contains('…'));
        assert_eq!(lines[3].chars().count(), 60 + 2 + 1);
    }
}
