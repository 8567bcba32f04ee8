//! The cheap, cloneable way into the engine: every front end submits its typed requests
//! here and awaits the answers (the actor itself is in `mod.rs`).

use super::*;

/// The cheap, cloneable way into the engine.
#[derive(Clone)]
pub struct EngineHandle {
    pub(super) tx: super::inbox::Inbox,
    /// Builds typed requests from client bodies on the caller's task.
    pub(super) intake: super::intake::Intake,
    pub(super) queue: Arc<Semaphore>,
    pub connections: Arc<AtomicUsize>,
    /// The next [`ConnId`].
    pub(super) next_conn: Arc<AtomicU64>,
    /// The store's name (`fjall`, `sled`), for health reports.
    pub(super) store_kind: &'static str,
    pub(super) subscribers: Arc<crate::events::held::Pool>,
}

impl EngineHandle {
    /// Queue a command of `bytes` bytes on the wire, waiting first while the engine's
    /// queue is full ([`QUEUE_PERMITS`]); the receiver resolves once the engine has
    /// committed and replied.
    pub async fn submit(
        &self,
        wid: Option<Arc<str>>,
        cmd: Command,
        bytes: usize,
    ) -> oneshot::Receiver<Answered> {
        self.submit_on(None, wid, cmd, bytes).await
    }

    /// [`submit`](Self::submit) for a connection without a worker id: the jobs its FETCHes
    /// claim are held by `conn` and go back to their queues when it closes.
    pub async fn submit_on(
        &self,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
        bytes: usize,
    ) -> oneshot::Receiver<Answered> {
        self.submit_with(conn, wid, cmd, bytes, false).await
    }

    /// [`submit_on`](Self::submit_on), or with `viewed` a state change answered with the
    /// job as it left it ([`call_viewed`](Self::call_viewed)): the form a request takes
    /// when it arrives from another node.
    pub async fn submit_with(
        &self,
        conn: Option<ConnId>,
        wid: Option<Arc<str>>,
        cmd: Command,
        bytes: usize,
        viewed: bool,
    ) -> oneshot::Receiver<Answered> {
        let weight = (1 + bytes / PERMIT_BYTES).min(QUEUE_PERMITS);
        // The semaphore is never closed; if it were, the request would go unbounded.
        let permit = self
            .queue
            .clone()
            .acquire_many_owned(weight as u32)
            .await
            .ok();
        let (reply, rx) = oneshot::channel();
        let work = Work::of(cmd);
        let req = Request {
            conn: conn.filter(|_| wid.is_none()),
            wid,
            work,
            reply,
            permit,
            viewed,
        };
        if let Err(e) = self.tx.send(Msg::Request(req)) {
            // The engine is gone (shutting down or failed); answer for it.
            if let Msg::Request(req) = e.0 {
                let _ = req.reply.send(unavailable());
            }
        }
        rx
    }

    /// How front ends validate client bodies into requests (jobs, cron, workflows).
    pub fn intake(&self) -> &super::intake::Intake {
        &self.intake
    }

    /// Submit and wait for the reply. The weight counts the job envelopes of PUSH and
    /// PUSHB (other in-process commands are small).
    pub async fn call(&self, wid: Option<Arc<str>>, cmd: Command) -> Answered {
        let bytes = match &cmd {
            Command::Push { len, .. } => *len,
            Command::PushBatch(jobs) | Command::PushEach(jobs) => {
                jobs.iter().map(|(_, l)| *l).sum()
            }
            _ => 0,
        };
        self.submit(wid, cmd, bytes)
            .await
            .await
            .unwrap_or_else(|_| unavailable())
    }

    /// An ACK, FAIL, CANCEL or ACTIVATE answered with the job as the change left it
    /// (`Answer::Job`), read in the same engine step, so a later change in the same batch
    /// (a waiting FETCH claiming a requeued job) cannot show in the reply; `Answer::Nothing`
    /// when the change deleted the job. A CANCEL of a finished job is refused
    /// (`INVALID_STATE_TRANSITION`) instead of being a no-op.
    pub async fn call_viewed(&self, wid: Option<Arc<str>>, cmd: Command) -> Answered {
        self.submit_with(None, wid, cmd, 0, true)
            .await
            .await
            .unwrap_or_else(|_| unavailable())
    }

    /// A HELLO with a worker id. `reserve`: when the worker stops heartbeating, its jobs
    /// stay reserved until their own visibility timeout (a Faktory job's `reserve_for`) as
    /// Faktory does, instead of going back after `--heartbeat-timeout` (the OJS rule).
    pub fn register_worker(&self, wid: Arc<str>, info: serde_json::Value, reserve: bool) {
        let _ = self.tx.send(Msg::Register { wid, info, reserve });
    }

    pub fn disconnect_worker(&self, wid: Arc<str>) {
        let _ = self.tx.send(Msg::Disconnect { wid });
    }

    /// A new id for a connection without a worker id.
    pub fn connection_id(&self) -> ConnId {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// The connection `conn` closed (and every reply it was owed has been written or
    /// dropped): the jobs it fetched and did not settle go back to their queues at once,
    /// in one commit, instead of waiting out their visibility timeout.
    pub fn connection_closed(&self, conn: ConnId) {
        let _ = self.tx.send(Msg::Closed { conn });
    }

    /// Read up to `limit` events matching `filter` from `start`; with `live`, also join the
    /// live feed when the read reaches the head of the log.
    /// One page of matching events from the log, at most `limit` (a poll).
    pub async fn events(
        &self,
        filter: crate::events::EventFilter,
        start: crate::events::Start,
        limit: usize,
    ) -> Result<Page, OjsError> {
        self.read(filter, start, limit, None, None).await
    }

    /// [`events`](Self::events), at most `bytes` of events (but at least one): a page a
    /// node reads for a subscriber of another node, whose buffer has that much room.
    pub async fn events_within(
        &self,
        filter: crate::events::EventFilter,
        start: crate::events::Start,
        limit: usize,
        bytes: usize,
    ) -> Result<Page, OjsError> {
        self.read(filter, start, limit, None, Some(bytes)).await
    }

    /// A subscriber's page: the engine appends the matching events to `buf` within the
    /// bytes `reservation` holds, and joins `buf` to the live feed when the page reaches
    /// the head. The answer's `events` is empty; `count` says how many were appended.
    pub async fn read_into(
        &self,
        filter: crate::events::EventFilter,
        start: crate::events::Start,
        limit: usize,
        buf: Arc<crate::events::held::Buffer>,
        reservation: crate::events::held::Reservation,
    ) -> Result<Page, OjsError> {
        self.read(filter, start, limit, Some((buf, reservation)), None)
            .await
    }

    async fn read(
        &self,
        filter: crate::events::EventFilter,
        start: crate::events::Start,
        limit: usize,
        into: Option<(
            Arc<crate::events::held::Buffer>,
            crate::events::held::Reservation,
        )>,
        budget: Option<usize>,
    ) -> Result<Page, OjsError> {
        let (reply, rx) = oneshot::channel();
        let msg = Msg::Events(events::Read {
            filter,
            start,
            limit,
            into,
            budget,
            reply,
        });
        if self.tx.send(msg).is_err() {
            return Err(OjsError::new(
                ErrorCode::BackendUnavailable,
                "the engine is not running",
            ));
        }
        rx.await.unwrap_or_else(|_| {
            Err(OjsError::new(
                ErrorCode::BackendUnavailable,
                "the engine is not running",
            ))
        })
    }

    /// A subscription to the event stream, read from this engine (`Subscription`).
    pub fn subscription(
        &self,
        filter: crate::events::EventFilter,
        start: crate::events::Start,
    ) -> super::Subscription {
        super::Subscription::new(Arc::new(self.clone()), filter, start)
    }

    /// The buffers of every event subscriber, and their memory bounds.
    pub fn subscribers(&self) -> &Arc<crate::events::held::Pool> {
        &self.subscribers
    }

    /// The metrics of ojs-events §7 in Prometheus text format.
    pub async fn metrics(&self) -> Option<metrics::MetricsView> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Msg::Metrics { reply }).ok()?;
        rx.await.ok()
    }

    /// The name of the store the engine writes to.
    pub fn store_kind(&self) -> &'static str {
        self.store_kind
    }

    /// Whether both handles lead to the same engine.
    pub fn same_engine(&self, other: &EngineHandle) -> bool {
        self.tx.same_channel(&other.tx)
    }

    /// Ask the engine to finish its current batch, commit and stop.
    pub fn shutdown(&self) {
        let _ = self.tx.send(Msg::Shutdown);
    }
}

pub fn unavailable() -> Answered {
    Err(OjsError::new(
        ErrorCode::BackendUnavailable,
        "the engine is not running",
    ))
}

#[cfg(test)]
mod queue_tests {
    use super::*;
    use crossbeam_channel::Receiver;

    /// A handle whose engine never drains its channel.
    fn stalled() -> (EngineHandle, Receiver<Msg>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let handle = EngineHandle {
            tx: super::super::inbox::Inbox::alone(tx),
            intake: Default::default(),
            queue: Arc::new(Semaphore::new(QUEUE_PERMITS)),
            connections: Arc::new(AtomicUsize::new(0)),
            next_conn: Arc::new(AtomicU64::new(1)),
            store_kind: "none",
            subscribers: crate::events::held::Pool::new(Default::default()),
        };
        (handle, rx)
    }

    #[test]
    fn a_full_queue_makes_submitters_wait_until_the_engine_takes_requests() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let (h, rx) = stalled();
        rt.block_on(async {
            // One large request (1 MiB: 65 permits) and small ones fill the bound.
            let _big = h.submit(None, Command::Info, 1 << 20).await;
            for _ in 0..QUEUE_PERMITS - 65 {
                drop(h.submit(None, Command::Info, 10).await);
            }
            assert_eq!(rx.len(), QUEUE_PERMITS - 64);
            let next = h.submit(None, Command::Info, 10);
            tokio::pin!(next);
            let waited = tokio::time::timeout(Duration::from_millis(100), next.as_mut()).await;
            assert!(waited.is_err(), "a full queue must hold the submitter");
            // The engine takes the big one up: its permits come back and the next goes in.
            match rx.recv().unwrap() {
                Msg::Request(req) => drop(req),
                _ => unreachable!(),
            }
            tokio::time::timeout(Duration::from_secs(5), next)
                .await
                .expect("admitted once permits are back");
        });
    }
}

/// What an engine shares with the front ends and may be given before it starts (a node
/// that serves clients by forwarding before it runs an engine of its own keeps them).
#[derive(Clone)]
pub struct Shared {
    /// The event subscribers' buffers.
    pub subscribers: Arc<crate::events::held::Pool>,
    /// Client connections open (INFO's `connections`).
    pub connections: Arc<AtomicUsize>,
    /// The next connection id: shared by the engines of one node (cluster mode runs one
    /// per partition), so that an id names one client connection on all of them.
    pub next_conn: Arc<AtomicU64>,
}

impl Shared {
    /// Fresh ones, for buffers bounded by `held`.
    pub fn new(held: crate::events::held::HeldLimits) -> Shared {
        Shared {
            subscribers: crate::events::held::Pool::new(held),
            connections: Arc::new(AtomicUsize::new(0)),
            next_conn: Arc::new(AtomicU64::new(1)),
        }
    }
}
