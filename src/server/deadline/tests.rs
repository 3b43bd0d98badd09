use super::*;

// Real time (tokio's paused clock needs a feature the crate does not otherwise
// use): short deadlines, generous margins for a loaded machine.
const HEAD: Duration = Duration::from_millis(150);
const IDLE: Duration = Duration::from_millis(400);

/// `expired` within a few seconds (a deadline missed would wait an hour).
async fn within(expired: impl Future<Output = Expired>) -> Expired {
    tokio::time::timeout(Duration::from_secs(5), expired)
        .await
        .expect("the deadline fired")
}

fn about(elapsed: Duration, expected: Duration) {
    assert!(
        elapsed >= expected && elapsed < expected + Duration::from_millis(300),
        "{elapsed:?} for {expected:?}"
    );
}

#[tokio::test]
async fn a_silent_connection_misses_its_head_deadline() {
    let clock = Clock::new(HEAD, IDLE);
    let started = Instant::now();
    assert_eq!(clock.expired().await, Expired::Head);
    about(started.elapsed(), HEAD);
}

#[tokio::test]
async fn http1_keep_alive_waits_idle_then_heads_again() {
    let clock = Clock::new(HEAD, IDLE);
    clock.read(b"POST /mcp HTTP/1.1\r\n");
    let request = clock.request();
    // In progress: no deadline, however long it takes.
    let waited = tokio::time::timeout(IDLE + HEAD, clock.expired()).await;
    assert!(waited.is_err());
    drop(request);
    // Idle; a new request's first bytes put the head deadline back in force.
    tokio::time::sleep(IDLE / 2).await;
    clock.read(b"GET");
    let head_since = Instant::now();
    assert_eq!(clock.expired().await, Expired::Head);
    about(head_since.elapsed(), HEAD);
    // Without further bytes: idle.
    let clock = Clock::new(HEAD, IDLE);
    clock.read(b"GET / HTTP/1.1\r\n\r\n");
    drop(clock.request());
    let idle_since = Instant::now();
    assert_eq!(clock.expired().await, Expired::Idle);
    about(idle_since.elapsed(), IDLE);
}

/// Finding 9 of the second review: idle keep-alive connections held every slot for
/// `client_idle_ms`. A reclaimed idle connection closes at once; a busy one, or one
/// that started a request meanwhile, is not reclaimed.
#[tokio::test]
async fn an_idle_connection_is_reclaimed_at_once_and_a_busy_one_never() {
    let clock = Clock::new(HEAD, Duration::from_secs(3600));
    clock.read(b"GET / HTTP/1.1\r\n\r\n");
    let request = clock.request();
    assert_eq!(clock.idle_since(), None);
    assert!(!clock.reclaim(), "a request is in progress");
    drop(request);
    assert!(clock.idle_since().is_some());
    let started = Instant::now();
    assert!(clock.reclaim());
    assert!(!clock.reclaim(), "once");
    assert_eq!(clock.idle_since(), None, "not offered twice");
    assert_eq!(clock.expired().await, Expired::Idle);
    assert!(started.elapsed() < Duration::from_millis(300));
    // Bytes of a new request after the reclaim: the reclaim is void.
    let clock = Clock::new(HEAD, Duration::from_secs(3600));
    clock.read(b"GET / HTTP/1.1\r\n\r\n");
    drop(clock.request());
    assert!(clock.reclaim());
    clock.read(b"GET");
    assert_eq!(clock.expired().await, Expired::Head);
}

/// The task already waits on a far idle deadline when a request's first bytes bring
/// a nearer head deadline: the head deadline holds all the same; and a deadline that
/// appears while the task waits (a request's end) is the one that fires.
#[tokio::test]
async fn a_head_deadline_nearer_than_the_idle_one_in_wait_holds() {
    let clock = Clock::new(HEAD, Duration::from_secs(3600));
    clock.read(b"GET / HTTP/1.1\r\n\r\n");
    drop(clock.request());
    let bytes_later = async {
        tokio::time::sleep(HEAD / 2).await;
        clock.read(b"GET");
        Instant::now()
    };
    let (expired, head_since) = tokio::join!(within(clock.expired()), bytes_later);
    assert_eq!(expired, Expired::Head);
    about(head_since.elapsed(), HEAD);
    // And a busy connection whose request ends: its idle deadline, in wait already.
    let clock = Clock::new(HEAD, IDLE);
    clock.read(b"GET / HTTP/1.1\r\n\r\n");
    let request = clock.request();
    let ends_later = async {
        tokio::time::sleep(HEAD * 2).await;
        drop(request);
        Instant::now()
    };
    let (expired, idle_since) = tokio::join!(within(clock.expired()), ends_later);
    assert_eq!(expired, Expired::Idle);
    about(idle_since.elapsed(), IDLE);
}

/// Shutdown reaches a connection through its clock, busy or not, and at once.
#[tokio::test]
async fn a_stop_ends_the_wait_at_once_even_with_a_request_in_progress() {
    let clock = Clock::new(Duration::from_secs(3600), Duration::from_secs(3600));
    clock.read(b"POST /mcp HTTP/1.1\r\n");
    let _request = clock.request();
    let started = Instant::now();
    let stop_later = async {
        tokio::time::sleep(HEAD).await;
        clock.stop();
    };
    let (expired, ()) = tokio::join!(within(clock.expired()), stop_later);
    assert_eq!(expired, Expired::Stop);
    about(started.elapsed(), HEAD);
    // And a wait that starts after the stop ends on its first poll.
    assert_eq!(clock.expired().await, Expired::Stop);
}

#[tokio::test]
async fn http2_frames_between_streams_are_not_heads() {
    let clock = Clock::new(HEAD, IDLE);
    clock.read(&H2_PREFACE[..10]);
    assert!(!clock.is_http2());
    clock.read(&H2_PREFACE[10..]);
    assert!(clock.is_http2());
    let idle_since = Instant::now();
    tokio::time::sleep(IDLE / 2).await;
    // A ping: still idle since the preface, and no head deadline.
    clock.read(b"\0\0\x08\x06\0\0\0\0\0");
    assert_eq!(clock.expired().await, Expired::Idle);
    about(idle_since.elapsed(), IDLE);
    // Two streams: busy until both ended.
    let (a, b) = (clock.request(), clock.request());
    drop(a);
    let waited = tokio::time::timeout(IDLE + HEAD, clock.expired()).await;
    assert!(waited.is_err());
    drop(b);
    assert_eq!(clock.expired().await, Expired::Idle);
}

/// Counts its wake-ups.
#[derive(Default)]
struct Wakes(std::sync::atomic::AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Wakes {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// The wait is lazy: a request's start, its end and the next request's bytes bring
/// no nearer deadline than the one in wait, and wake nothing; a nearer one does.
#[tokio::test]
async fn only_a_nearer_deadline_wakes_the_wait() {
    let clock = Clock::new(Duration::from_secs(10), Duration::from_secs(3600));
    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(wakes.clone());
    let mut cx = Context::from_waker(&waker);
    let mut wait = std::pin::pin!(clock.expired());
    assert!(
        wait.as_mut().poll(&mut cx).is_pending(),
        "in wait for the head"
    );
    for _ in 0..3 {
        clock.read(b"POST /mcp HTTP/1.1\r\n");
        drop(clock.request());
    }
    assert_eq!(wakes.count(), 0, "no request brought a nearer deadline");
    // Reclaimed while idle: due now, nearer than the head deadline in wait.
    assert!(clock.reclaim());
    assert_eq!(wakes.count(), 1);
    assert_eq!(wait.as_mut().poll(&mut cx), Poll::Ready(Expired::Idle));
    // A busy connection's timer is set for the nearest deadline a change can bring
    // (a new head's): its request's end brings a farther one.
    let clock = Clock::new(Duration::from_secs(10), Duration::from_secs(3600));
    clock.read(b"POST /mcp HTTP/1.1\r\n");
    let request = clock.request();
    let mut wait = std::pin::pin!(clock.expired());
    assert!(wait.as_mut().poll(&mut cx).is_pending());
    let before = wakes.count();
    drop(request);
    clock.read(b"POST /mcp HTTP/1.1\r\n");
    assert_eq!(wakes.count(), before);
    // A head deadline nearer than any in wait wakes it.
    let clock = Clock::new(Duration::from_secs(10), Duration::from_secs(3600));
    clock.read(b"POST /mcp HTTP/1.1\r\n");
    drop(clock.request());
    let mut wait = std::pin::pin!(clock.expired());
    assert!(wait.as_mut().poll(&mut cx).is_pending(), "idle for an hour");
    let before = wakes.count();
    clock.read(b"POST /mcp HTTP/1.1\r\n");
    assert_eq!(wakes.count(), before + 1);
    assert!(
        wait.as_mut().poll(&mut cx).is_pending(),
        "a head within ten seconds"
    );
}

/// [`OnItsWake`] polls its future on the first poll and after the future's own
/// waker was woken, never on the task's other wake-ups; and that waker wakes the
/// task.
#[test]
fn on_its_wake_polls_only_when_its_future_was_woken() {
    let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let inner: Arc<Mutex<Option<Waker>>> = Arc::default();
    let future = {
        let (polls, inner) = (polls.clone(), inner.clone());
        std::future::poll_fn(move |cx| {
            let n = polls.fetch_add(1, Ordering::SeqCst) + 1;
            *inner.lock().expect("not poisoned") = Some(cx.waker().clone());
            if n == 3 {
                Poll::Ready(n)
            } else {
                Poll::Pending
            }
        })
    };
    let task = Arc::new(Wakes::default());
    let waker = Waker::from(task.clone());
    let mut cx = Context::from_waker(&waker);
    let mut gated = std::pin::pin!(OnItsWake::new(future));
    assert!(gated.as_mut().poll(&mut cx).is_pending());
    assert_eq!(polls.load(Ordering::SeqCst), 1, "polled on the first poll");
    for _ in 0..5 {
        assert!(gated.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(
        polls.load(Ordering::SeqCst),
        1,
        "not on the task's other wake-ups"
    );
    let own = inner.lock().expect("not poisoned").take().expect("a waker");
    own.wake_by_ref();
    assert_eq!(task.count(), 1, "its waker wakes the task");
    assert!(gated.as_mut().poll(&mut cx).is_pending());
    assert_eq!(polls.load(Ordering::SeqCst), 2);
    own.wake();
    assert_eq!(gated.as_mut().poll(&mut cx), Poll::Ready(3));
}
