//! The flowtable stage's traffic: bulk TCP streams whose every byte the receiver confirms,
//! 64-byte requests answered on one open connection, and the machine's busy CPU time. Sockets
//! are made on a thread that joined the sender's namespace (`Netns::run`), as the lab's other
//! clients are, and are then driven from ordinary threads: a socket stays in the namespace it
//! was made in.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use kubenft::netns::Netns;

/// The server pod's bulk sink and request echo (targets of the Services' two ports).
pub const BULK_PORT: u16 = 9100;
pub const ECHO_PORT: u16 = 9101;
/// The size of a request and of its answer.
pub const REQUEST: usize = 64;
/// What one `write` hands the kernel.
const CHUNK: usize = 256 * 1024;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a sender waits for the sink's count once it stopped sending (the bytes in flight
/// drain first: seconds under TCG).
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// The server side of a bulk stream: reads until the sender shuts its side, then answers
/// with the number of bytes it read (8 bytes, big-endian).
pub fn sink(mut s: TcpStream) {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(_) => return,
        }
    }
    let _ = s.write_all(&total.to_be_bytes());
}

/// The server side of the requests: each REQUEST bytes read are written back, until closed.
pub fn echo_requests(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut buf = [0u8; REQUEST];
    while s.read_exact(&mut buf).is_ok() && s.write_all(&buf).is_ok() {}
}

/// One bulk transfer: bytes the receivers confirmed, from the first write to the last
/// confirmation, and the machine's busy CPU time over the same span.
#[derive(Clone, Copy, Debug)]
pub struct Bulk {
    pub bytes: u64,
    pub elapsed: Duration,
    pub busy: Duration,
}

impl Bulk {
    pub fn gbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e9
    }

    /// Busy CPU seconds (every core, the whole machine) per GB (10⁹ bytes) moved.
    pub fn cpu_s_per_gb(&self) -> f64 {
        self.busy.as_secs_f64() / (self.bytes as f64 / 1e9)
    }
}

/// `streams` TCP connections from `from` to `to`, each writing as fast as it can for
/// `duration`, then waiting for the sink's count of what it read; an error if any count
/// differs from what was sent.
pub fn bulk(
    from: &Netns,
    to: SocketAddr,
    streams: usize,
    duration: Duration,
) -> Result<Bulk, String> {
    let sockets = from
        .run(move || {
            (0..streams)
                .map(|_| TcpStream::connect_timeout(&to, CONNECT_TIMEOUT))
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("connecting to {to}: {e}"))?;
    let busy_before = busy()?;
    let start = Instant::now();
    let deadline = start + duration;
    let counts: Vec<Result<u64, String>> = std::thread::scope(|scope| {
        let senders: Vec<_> = sockets
            .into_iter()
            .map(|s| scope.spawn(move || send_until(s, deadline)))
            .collect();
        senders
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("sender panicked".into())))
            .collect()
    });
    let elapsed = start.elapsed();
    let busy = busy()?.saturating_sub(busy_before);
    let mut bytes = 0;
    for c in counts {
        bytes += c.map_err(|e| format!("{to}: {e}"))?;
    }
    Ok(Bulk {
        bytes,
        elapsed,
        busy,
    })
}

fn send_until(mut s: TcpStream, deadline: Instant) -> Result<u64, String> {
    let buf = vec![0x5au8; CHUNK];
    let mut sent = 0u64;
    while Instant::now() < deadline {
        s.write_all(&buf).map_err(|e| format!("write: {e}"))?;
        sent += CHUNK as u64;
    }
    s.shutdown(Shutdown::Write)
        .map_err(|e| format!("shutdown: {e}"))?;
    s.set_read_timeout(Some(CONFIRM_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut count = [0u8; 8];
    s.read_exact(&mut count)
        .map_err(|e| format!("the sink's count: {e}"))?;
    let read = u64::from_be_bytes(count);
    if read != sent {
        return Err(format!("sent {sent} bytes, the sink read {read}"));
    }
    Ok(read)
}

/// A long-lived connection from `from` to an `echo_requests` server.
pub fn open(from: &Netns, to: SocketAddr) -> Result<TcpStream, String> {
    let s = from
        .run(move || TcpStream::connect_timeout(&to, CONNECT_TIMEOUT))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("connecting to {to}: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(CONNECT_TIMEOUT))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// `n` requests of REQUEST bytes on `s`, each timed from its write to the last byte of its
/// answer, which must be the request.
pub fn round_trips(s: &mut TcpStream, n: usize) -> Result<Vec<Duration>, String> {
    let mut request = [0u8; REQUEST];
    let mut answer = [0u8; REQUEST];
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        request.fill(i as u8);
        let start = Instant::now();
        s.write_all(&request)
            .map_err(|e| format!("request {i}: write: {e}"))?;
        s.read_exact(&mut answer)
            .map_err(|e| format!("request {i}: answer: {e}"))?;
        times.push(start.elapsed());
        if answer != request {
            return Err(format!("request {i}: answered with other bytes"));
        }
    }
    Ok(times)
}

/// The whole machine's busy CPU time so far: user + system + irq + softirq of /proc/stat's
/// `cpu` line. Every namespace shares the one kernel, so this holds the node's forwarding
/// together with the pods' sockets, the bench's own threads and anything else the machine
/// runs; `nice`d processes (other builds) are left out, as are steal and idle.
pub fn busy() -> Result<Duration, String> {
    let stat = std::fs::read_to_string("/proc/stat").map_err(|e| format!("/proc/stat: {e}"))?;
    busy_of(&stat)
}

fn busy_of(stat: &str) -> Result<Duration, String> {
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or("/proc/stat: no cpu line")?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().map_err(|e| format!("/proc/stat: {f:?}: {e}")))
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal …
    let [user, _nice, system, _idle, _iowait, irq, softirq, ..] = ticks[..] else {
        return Err(format!("/proc/stat: short cpu line {line:?}"));
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let busy = user + system + irq + softirq;
    Ok(Duration::from_nanos(busy * 1_000_000_000 / hz))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_server::{Answering, Server};
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Bytes read by `counting_sink`, counted apart from what it tells the sender.
    static READ_BY_SINK: AtomicU64 = AtomicU64::new(0);
    static ECHOED: AtomicU64 = AtomicU64::new(0);

    /// `sink`, also adding what it read to READ_BY_SINK.
    fn counting_sink(s: TcpStream) {
        let mut s = CountingReader(s);
        let mut buf = vec![0u8; CHUNK];
        let mut total = 0u64;
        while let Ok(n @ 1..) = s.read(&mut buf) {
            total += n as u64;
        }
        let _ = s.0.write_all(&total.to_be_bytes());
    }

    struct CountingReader(TcpStream);

    impl Read for CountingReader {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(buf)?;
            READ_BY_SINK.fetch_add(n as u64, Ordering::Relaxed);
            Ok(n)
        }
    }

    fn counting_echo(mut s: TcpStream) {
        let mut buf = [0u8; REQUEST];
        while s.read_exact(&mut buf).is_ok() && s.write_all(&buf).is_ok() {
            ECHOED.fetch_add(REQUEST as u64, Ordering::Relaxed);
        }
    }

    #[test]
    fn bulk_streams_and_round_trips_move_the_bytes_they_claim() {
        if !kubenft::netns::can_create() {
            eprintln!("skipped: needs root to create network namespaces");
            return;
        }
        let ns = Netns::create("ftbytes").expect("namespace");
        let _sink =
            Server::start(&ns, BULK_PORT, Answering::ThreadEach, counting_sink).expect("sink");
        let _echo =
            Server::start(&ns, ECHO_PORT, Answering::ThreadEach, counting_echo).expect("echo");
        let to = SocketAddr::from(([127, 0, 0, 1], BULK_PORT));

        let run = bulk(&ns, to, 3, Duration::from_millis(300)).expect("bulk");
        // The sinks' threads count before they answer, so every byte is in by now.
        assert_eq!(run.bytes, READ_BY_SINK.load(Ordering::Relaxed));
        assert!(run.bytes >= 3 * CHUNK as u64, "{run:?}");
        assert!(run.elapsed >= Duration::from_millis(300), "{run:?}");
        let rate = run.bytes as f64 * 8.0 / run.elapsed.as_secs_f64() / 1e9;
        assert!((run.gbit_per_s() - rate).abs() < 1e-9);
        assert!(run.busy > Duration::ZERO, "the senders' CPU time: {run:?}");

        let mut s = open(&ns, SocketAddr::from(([127, 0, 0, 1], ECHO_PORT))).expect("open");
        let times = round_trips(&mut s, 50).expect("round trips");
        assert_eq!(times.len(), 50);
        drop(s);
        // The echo counts after answering: give its last increment a moment.
        let deadline = Instant::now() + Duration::from_secs(2);
        while ECHOED.load(Ordering::Relaxed) < 50 * REQUEST as u64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(ECHOED.load(Ordering::Relaxed), 50 * REQUEST as u64);
    }

    #[test]
    fn a_sink_that_reads_less_than_was_sent_is_an_error() {
        if !kubenft::netns::can_create() {
            eprintln!("skipped: needs root to create network namespaces");
            return;
        }
        fn short_sink(mut s: TcpStream) {
            let mut buf = vec![0u8; CHUNK];
            let mut total = 0u64;
            while let Ok(n @ 1..) = s.read(&mut buf) {
                total += n as u64;
            }
            let _ = s.write_all(&(total - 1).to_be_bytes());
        }
        let ns = Netns::create("ftshort").expect("namespace");
        let _sink = Server::start(&ns, BULK_PORT, Answering::ThreadEach, short_sink).unwrap();
        let err = bulk(
            &ns,
            SocketAddr::from(([127, 0, 0, 1], BULK_PORT)),
            1,
            Duration::from_millis(100),
        )
        .expect_err("a short count");
        assert!(err.contains("the sink read"), "{err}");
    }

    #[test]
    fn busy_time_is_user_system_irq_and_softirq() {
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        let stat = "cpu  100 7 50 9999 3 2 8 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(
            busy_of(stat).unwrap(),
            Duration::from_nanos(160 * 1_000_000_000 / hz)
        );
        assert!(busy_of("cpu  1 2\n").is_err());
    }
}
