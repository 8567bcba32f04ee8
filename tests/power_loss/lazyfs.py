#!/usr/bin/env python3
"""A FUSE file system that loses, at a power cut, everything that was not fsynced.

    lazyfs.py [--names-at-once] BACKING MOUNTPOINT [REPORT]

It loads BACKING into memory, serves it at MOUNTPOINT, and keeps every change in memory
only, as a page cache would. What it considers durable follows POSIX, the harsh reading
(Jepsen's LazyFS drops un-fsynced file data the same way; this one also drops directory
entries, as a power cut on a real disk can):

- a file's contents (data and length) become durable at its fsync or fdatasync: the
  contents at that moment;
- a directory's entries (creations, removals, renames in it) become durable at an fsync
  of the directory itself: a new file whose directory was never fsynced is lost, whatever
  was fsynced into it; a rename whose directory was not fsynced is undone;
- nothing else is ever written down: no background writeback.

With `--names-at-once`, directory entries are durable as soon as they change (what a
journalling file system such as ext4 usually gives, and what LazyFS models): only file data
waits for an fsync. A cut then leaves files that exist with less in them than was written,
e.g. a new store's files present but empty.

Unmounting it (`umount MOUNTPOINT`) is the power cut: BACKING is replaced by the durable
image (what an fsync reached, reachable through durable directory entries; a file that
was never fsynced is there empty) and the process exits. Mount it again on BACKING to
"reboot". A one-line JSON summary of what was kept and what was dropped goes to REPORT.

Needs libfuse 3 (`libfuse3.so.3`) and the `mfusepy` package from PyPI; runs as root (it
mounts with mount(2) directly, no fusermount). Single-threaded: operations are applied in
the order the kernel sends them.
"""

import errno
import json
import os
import shutil
import stat
import sys
import time

import mfusepy as fuse

BLOCK = 64 * 1024


class Inode:
    """A file or a directory: its live state, and what of it is durable."""

    counter = 0

    def __init__(self, mode):
        Inode.counter += 1
        self.ino = Inode.counter
        self.mode = mode
        self.mtime = time.time_ns()
        # Files: block index -> bytes (missing blocks read as zeros), and the length.
        self.blocks = {}
        self.size = 0
        # Durable contents: None until the first fsync (then a (blocks, size) pair).
        self.durable = None
        # Directories: name -> Inode, live and durable.
        self.entries = {}
        self.durable_entries = {}

    def is_dir(self):
        return stat.S_ISDIR(self.mode)

    def read(self, offset, size):
        end = min(offset + size, self.size)
        out = bytearray()
        pos = offset
        while pos < end:
            idx, off = divmod(pos, BLOCK)
            n = min(BLOCK - off, end - pos)
            block = self.blocks.get(idx)
            chunk = block[off:off + n] if block is not None else b""
            out += chunk + b"\0" * (n - len(chunk))
            pos += n
        return bytes(out)

    def write(self, offset, data):
        pos = 0
        while pos < len(data):
            idx, off = divmod(offset + pos, BLOCK)
            n = min(BLOCK - off, len(data) - pos)
            block = self.blocks.get(idx, b"")
            if len(block) < off:
                block = block + b"\0" * (off - len(block))
            self.blocks[idx] = block[:off] + data[pos:pos + n] + block[off + n:]
            pos += n
        self.size = max(self.size, offset + len(data))

    def truncate(self, length):
        if length < self.size:
            last = (length + BLOCK - 1) // BLOCK
            self.blocks = {i: b for i, b in self.blocks.items() if i < last}
            idx, off = divmod(length, BLOCK)
            if off and idx in self.blocks:
                self.blocks[idx] = self.blocks[idx][:off]
        self.size = length

    def sync(self):
        if self.is_dir():
            self.durable_entries = dict(self.entries)
        else:
            self.durable = (dict(self.blocks), self.size)


def load(path):
    """An inode tree of a real directory, all of it durable."""
    st = os.lstat(path)
    node = Inode(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        for name in os.listdir(path):
            child = load(os.path.join(path, name))
            if child is not None:
                node.entries[name] = child
        node.durable_entries = dict(node.entries)
    elif stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            data = f.read()
        node.write(0, data)
        node.sync()
    else:
        return None
    return node


class LazyFS(fuse.Operations):
    use_ns = True

    def __init__(self, backing, report, names_at_once=False):
        self.names_at_once = names_at_once
        self.backing = backing
        self.report = report
        self.root = load(backing)
        self.fhs = {}
        self.next_fh = 1
        self.fsyncs = 0
        self.dir_fsyncs = 0

    # -- paths and handles

    def resolve(self, path):
        node = self.root
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir() or part not in node.entries:
                raise fuse.FuseOSError(errno.ENOENT)
            node = node.entries[part]
        return node

    def parent(self, path):
        head, name = os.path.split(path.rstrip("/"))
        node = self.resolve(head or "/")
        if not node.is_dir():
            raise fuse.FuseOSError(errno.ENOTDIR)
        return node, name

    def handle(self, node):
        fh = self.next_fh
        self.next_fh += 1
        self.fhs[fh] = node
        return fh

    def node(self, path, fh=None):
        if fh is not None and fh in self.fhs:
            return self.fhs[fh]
        if path is None:
            raise fuse.FuseOSError(errno.EBADF)
        return self.resolve(path)

    # -- metadata

    def getattr(self, path, fh=None):
        n = self.node(path, fh)
        size = 4096 if n.is_dir() else n.size
        allocated = sum(len(b) for b in n.blocks.values())
        return {
            "st_mode": n.mode,
            "st_ino": n.ino,
            "st_nlink": 2 if n.is_dir() else 1,
            "st_size": size,
            "st_blocks": (allocated + 511) // 512,
            "st_uid": os.getuid(),
            "st_gid": os.getgid(),
            "st_atime": n.mtime,
            "st_mtime": n.mtime,
            "st_ctime": n.mtime,
        }

    def readdir(self, path, fh):
        return [".", ".."] + list(self.node(path, fh).entries)

    def statfs(self, path):
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 24, "f_bfree": 1 << 23,
                "f_bavail": 1 << 23, "f_files": 1 << 20, "f_ffree": 1 << 19, "f_namemax": 255}

    def chmod(self, path, mode):
        n = self.resolve(path)
        n.mode = (n.mode & ~0o7777) | (mode & 0o7777)
        return 0

    def chown(self, path, uid, gid):
        return 0

    def utimens(self, path, times=None):
        return 0

    def access(self, path, amode):
        self.resolve(path)
        return 0

    # -- directory entries (durable only once their directory is fsynced)

    def changed(self, *dirs):
        """A namespace change in `dirs`: durable at once with --names-at-once."""
        if self.names_at_once:
            for d in dirs:
                d.durable_entries = dict(d.entries)

    def mkdir(self, path, mode):
        d, name = self.parent(path)
        if name in d.entries:
            raise fuse.FuseOSError(errno.EEXIST)
        d.entries[name] = Inode(stat.S_IFDIR | (mode & 0o7777))
        self.changed(d)
        return 0

    def create(self, path, mode, fi=None):
        d, name = self.parent(path)
        if name in d.entries:
            raise fuse.FuseOSError(errno.EEXIST)
        n = Inode(stat.S_IFREG | (mode & 0o7777))
        d.entries[name] = n
        self.changed(d)
        return self.handle(n)

    def unlink(self, path):
        d, name = self.parent(path)
        n = d.entries.get(name)
        if n is None:
            raise fuse.FuseOSError(errno.ENOENT)
        if n.is_dir():
            raise fuse.FuseOSError(errno.EISDIR)
        del d.entries[name]
        self.changed(d)
        return 0

    def rmdir(self, path):
        d, name = self.parent(path)
        n = d.entries.get(name)
        if n is None:
            raise fuse.FuseOSError(errno.ENOENT)
        if not n.is_dir():
            raise fuse.FuseOSError(errno.ENOTDIR)
        if n.entries:
            raise fuse.FuseOSError(errno.ENOTEMPTY)
        del d.entries[name]
        self.changed(d)
        return 0

    def rename(self, old, new):
        od, oname = self.parent(old)
        nd, nname = self.parent(new)
        n = od.entries.get(oname)
        if n is None:
            raise fuse.FuseOSError(errno.ENOENT)
        target = nd.entries.get(nname)
        if target is not None and target.is_dir():
            if not n.is_dir():
                raise fuse.FuseOSError(errno.EISDIR)
            if target.entries:
                raise fuse.FuseOSError(errno.ENOTEMPTY)
        del od.entries[oname]
        nd.entries[nname] = n
        self.changed(od, nd)
        return 0

    def link(self, target, source):
        d, name = self.parent(target)
        if name in d.entries:
            raise fuse.FuseOSError(errno.EEXIST)
        d.entries[name] = self.resolve(source)
        self.changed(d)
        return 0

    # -- file data (durable only at the file's fsync)

    def open(self, path, flags):
        n = self.resolve(path)
        if flags & os.O_TRUNC:
            n.truncate(0)
        return self.handle(n)

    def opendir(self, path):
        return self.handle(self.resolve(path))

    def release(self, path, fh):
        self.fhs.pop(fh, None)
        return 0

    def releasedir(self, path, fh):
        self.fhs.pop(fh, None)
        return 0

    def flush(self, path, fh):
        return 0

    def read(self, path, size, offset, fh):
        return self.node(path, fh).read(offset, size)

    def write(self, path, data, offset, fh):
        self.node(path, fh).write(offset, data)
        return len(data)

    def truncate(self, path, length, fh=None):
        self.node(path, fh).truncate(length)
        return 0

    def fallocate(self, path, mode, offset, size, fh):
        n = self.node(path, fh)
        if mode == 0 and offset + size > n.size:
            n.truncate(offset + size)
        return 0

    def fsync(self, path, datasync, fh):
        self.fsyncs += 1
        self.node(path, fh).sync()
        return 0

    def fsyncdir(self, path, datasync, fh):
        self.dir_fsyncs += 1
        self.node(path, fh).sync()
        return 0

    # -- the power cut

    def crash_image(self):
        """Replace BACKING by what survives: durable entries, durable contents."""
        stats = {"files": 0, "dirs": 0, "bytes_kept": 0, "never_synced_files": 0,
                 "fsyncs": self.fsyncs, "dir_fsyncs": self.dir_fsyncs}
        live = {"files": 0, "bytes": 0}

        def count_live(node):
            for child in node.entries.values():
                if child.is_dir():
                    count_live(child)
                else:
                    live["files"] += 1
                    live["bytes"] += child.size

        count_live(self.root)
        tmp = self.backing.rstrip("/") + ".crash"
        shutil.rmtree(tmp, ignore_errors=True)

        def write(node, path):
            os.mkdir(path)
            stats["dirs"] += 1
            for name, child in node.durable_entries.items():
                p = os.path.join(path, name)
                if child.is_dir():
                    write(child, p)
                    continue
                with open(p, "wb") as f:
                    if child.durable is None:
                        stats["never_synced_files"] += 1
                    else:
                        blocks, size = child.durable
                        for idx in sorted(blocks):
                            f.seek(idx * BLOCK)
                            f.write(blocks[idx][:max(0, size - idx * BLOCK)])
                        f.truncate(size)
                        stats["bytes_kept"] += size
                stats["files"] += 1

        write(self.root, tmp)
        shutil.rmtree(self.backing)
        os.rename(tmp, self.backing)
        stats["live_files"] = live["files"]
        stats["live_bytes"] = live["bytes"]
        return stats


def main():
    args = sys.argv[1:]
    names_at_once = "--names-at-once" in args
    args = [a for a in args if a != "--names-at-once"]
    if len(args) < 2:
        sys.exit(__doc__)
    # Absolute: libfuse changes the working directory to / once mounted.
    backing, mountpoint = os.path.abspath(args[0]), os.path.abspath(args[1])
    report = os.path.abspath(args[2]) if len(args) > 2 else None
    os.makedirs(backing, exist_ok=True)
    os.makedirs(mountpoint, exist_ok=True)
    fs = LazyFS(backing, report, names_at_once)
    # Foreground, one thread; the kernel's own cache of attributes and entries is turned
    # off so that every lookup reaches this process; the kernel handles flock itself.
    fuse.FUSE(fs, mountpoint, foreground=True, nothreads=True, fsname="lazyfs",
              hard_remove=True, entry_timeout=0, attr_timeout=0, negative_timeout=0)
    stats = fs.crash_image()
    if report:
        with open(report, "w") as f:
            f.write(json.dumps(stats) + "\n")


if __name__ == "__main__":
    main()
