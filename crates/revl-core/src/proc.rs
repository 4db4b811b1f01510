//! Running a child process without a shell: argv only, outputs capped, optional timeout.
//! The sandbox (`crate::sandbox`) hands its prepared [`Command`] to the same loop.
//!
//! Each output is kept head AND tail (a test runner's summary is at its end): up to
//! [`OUTPUT_CAP`] it is kept whole; beyond, the first [`HEAD_KEPT`] and the last
//! [`TAIL_KEPT`] bytes with one marker line between, `[… N bytes omitted …]`. An optional
//! [`OutputSink`] also sees every byte as it is read (`revl exec` in a terminal streams it).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Outputs are capped at 1 MiB each (docs/user-guide.md, "Shell commands: `revl exec`"),
/// head and tail kept; the middle is read and discarded.
pub const OUTPUT_CAP: usize = 1024 * 1024;
/// What a capped output keeps from its start.
pub const HEAD_KEPT: usize = OUTPUT_CAP / 2;
/// What a capped output keeps from its end.
pub const TAIL_KEPT: usize = OUTPUT_CAP - HEAD_KEPT;
/// How far a cut moves to fall on a line boundary (so the head ends and the tail starts with
/// a whole line); a line longer than this is cut where it is.
const LINE_SLACK: usize = 4096;

#[derive(Debug, Clone)]
pub struct Ran {
    /// Exit code; `None` when killed by a signal or by the timeout.
    pub code: Option<i32>,
    /// The signal that ended it, when one did (the timeout's SIGKILL included).
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub timed_out: bool,
    /// The person at the terminal interrupted it (Ctrl-C, see [`interrupt`]): revl killed
    /// it and went on to record what it had done.
    pub interrupted: bool,
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Note an interrupt (Ctrl-C): the command running now is killed at the next look (within
/// 100 ms) and its run reports `interrupted`. Async-signal-safe (one atomic store): the
/// CLI's SIGINT handler calls it.
pub fn interrupt() {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether an interrupt was noted.
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Which output of the command a chunk was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Where a command's output also goes while it runs, chunk by chunk as it is read, whole
/// (the cap applies only to what is kept). Called from the reader threads, one per stream;
/// a sink that blocks slows the command down, as a full pipe would.
#[derive(Clone)]
pub struct OutputSink(Arc<SinkFn>);

/// What an [`OutputSink`] calls: the stream and the bytes just read from it.
type SinkFn = dyn Fn(Stream, &[u8]) + Send + Sync;

impl OutputSink {
    pub fn new(f: impl Fn(Stream, &[u8]) + Send + Sync + 'static) -> Self {
        OutputSink(Arc::new(f))
    }
}

impl std::fmt::Debug for OutputSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputSink")
    }
}

/// One output as kept: its head, a ring of its last bytes, and how many fell between.
#[derive(Default)]
struct Capped {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    omitted: u64,
}

impl Capped {
    fn push(&mut self, mut b: &[u8]) {
        let take = (HEAD_KEPT - self.head.len()).min(b.len());
        self.head.extend_from_slice(&b[..take]);
        b = &b[take..];
        if b.len() >= TAIL_KEPT {
            self.omitted += (self.tail.len() + b.len() - TAIL_KEPT) as u64;
            self.tail.clear();
            self.tail.extend(&b[b.len() - TAIL_KEPT..]);
        } else {
            self.tail.extend(b);
            let over = self.tail.len().saturating_sub(TAIL_KEPT);
            if over > 0 {
                self.tail.drain(..over);
                self.omitted += over as u64;
            }
        }
    }

    /// The kept bytes, and whether any were omitted. When some were, the head ends and the
    /// tail starts on a line boundary where one is near, and the marker line sits between;
    /// head, marker and tail together stay within [`OUTPUT_CAP`] (the tail gives way).
    fn finish(self) -> (Vec<u8>, bool) {
        let Capped {
            mut head,
            tail,
            mut omitted,
        } = self;
        let mut tail = Vec::from(tail);
        if omitted == 0 {
            head.extend_from_slice(&tail);
            return (head, false);
        }
        let from = head.len().saturating_sub(LINE_SLACK);
        if let Some(nl) = head[from..].iter().rposition(|&c| c == b'\n') {
            let keep = from + nl + 1;
            omitted += (head.len() - keep) as u64;
            head.truncate(keep);
        }
        let near = tail.len().min(LINE_SLACK);
        if let Some(nl) = tail[..near].iter().position(|&c| c == b'\n') {
            omitted += (nl + 1) as u64;
            tail.drain(..=nl);
        }
        let mut cut = 0;
        loop {
            // Drop `cut` bytes from the tail's start, then on to a line start if one is near.
            if cut > 0 {
                let near = tail.len().min(cut + LINE_SLACK);
                if let Some(nl) = tail[cut.min(near)..near].iter().position(|&c| c == b'\n') {
                    cut += nl + 1;
                }
                let cut = cut.min(tail.len());
                tail.drain(..cut);
                omitted += cut as u64;
            }
            let sep = if head.is_empty() || head.ends_with(b"\n") {
                ""
            } else {
                "\n"
            };
            let marker = format!("{sep}[\u{2026} {omitted} bytes omitted \u{2026}]\n");
            let total = head.len() + marker.len() + tail.len();
            if total <= OUTPUT_CAP || tail.is_empty() {
                head.extend_from_slice(marker.as_bytes());
                head.extend_from_slice(&tail);
                return (head, true);
            }
            cut = total - OUTPUT_CAP;
        }
    }
}

fn drain<R: Read + Send + 'static>(
    mut r: R,
    stream: Stream,
    sink: Option<OutputSink>,
) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
    std::thread::spawn(move || {
        let mut kept = Capped::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
                Ok(n) => {
                    if let Some(s) = &sink {
                        (s.0)(stream, &buf[..n]);
                    }
                    kept.push(&buf[..n]);
                }
            }
        }
        kept.finish()
    })
}

/// Run `argv` in `cwd` with extra environment and optional stdin, never through a shell.
pub fn run(
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
) -> std::io::Result<Ran> {
    run_to(argv, cwd, env, stdin, timeout, None)
}

/// [`run`], its outputs also given to `sink` as they are read.
pub fn run_to(
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    sink: Option<OutputSink>,
) -> std::io::Result<Ran> {
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args).current_dir(cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_command(cmd, stdin, timeout, &mut || Ok(()), sink)
}

/// Spawn a prepared command with piped outputs, feed it `stdin` (else an empty one), wait
/// for it (killing it at the timeout) and collect its capped outputs. `started` runs once
/// the program is running; if it fails, the command is killed and its error returned.
/// `sink`, if given, sees the outputs as they are read.
pub fn run_command(
    cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    started: &mut dyn FnMut() -> std::io::Result<()>,
    sink: Option<OutputSink>,
) -> std::io::Result<Ran> {
    run_command_watched(cmd, stdin, timeout, started, &mut || false, sink)
}

/// How often the watcher looks at least (see [`run_command_watched`]).
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// [`run_command`], and `stop` is asked about every 100 ms while the command runs (less
/// often when asking takes long: at most a tenth of the time): `true` kills it (as a
/// timeout does, without `timed_out`).
pub fn run_command_watched(
    mut cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    started: &mut dyn FnMut() -> std::io::Result<()>,
    stop: &mut dyn FnMut() -> bool,
    sink: Option<OutputSink>,
) -> std::io::Result<Ran> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    if let Err(e) = started() {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    let out = drain(
        child.stdout.take().expect("piped stdout"),
        Stream::Stdout,
        sink.clone(),
    );
    let err = drain(
        child.stderr.take().expect("piped stderr"),
        Stream::Stderr,
        sink,
    );
    if let (Some(data), Some(mut w)) = (stdin, child.stdin.take()) {
        // A child that does not read its stdin must not block us: write from a thread.
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let start = Instant::now();
    let mut last_watch = start;
    let mut watch_every = WATCH_EVERY;
    let mut timed_out = false;
    let mut interrupted_here = false;
    let mut nap = Duration::from_micros(200);
    // The child's exit wakes the wait at once where the kernel gives a process descriptor
    // (Linux 5.3); the naps bound how late a timeout, an interrupt or a look is noticed.
    let exited = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    )
    .ok();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            interrupted_here = interrupted();
            break st;
        }
        if interrupted() {
            interrupted_here = true;
            let _ = child.kill();
            break child.wait()?;
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            timed_out = true;
            let _ = child.kill();
            break child.wait()?;
        }
        if last_watch.elapsed() >= watch_every {
            last_watch = Instant::now();
            if stop() {
                let _ = child.kill();
                break child.wait()?;
            }
            // A look that grows with what the command wrote (a walk of its upper layer)
            // takes at most a tenth of a core: the next waits ten times as long as this one
            // took (the command competes for the same cores); never less than 100 ms.
            watch_every = (last_watch.elapsed() * 10).max(WATCH_EVERY);
        }
        match &exited {
            Some(fd) => {
                let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                let wait = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: nap.as_nanos() as _,
                };
                let _ = rustix::event::poll(&mut fds, Some(&wait));
            }
            None => std::thread::sleep(nap),
        }
        nap = (nap * 2).min(Duration::from_millis(5));
    };
    let (stdout, stdout_truncated) = out.join().unwrap_or_default();
    let (stderr, stderr_truncated) = err.join().unwrap_or_default();
    Ok(Ran {
        code: if timed_out { None } else { status.code() },
        signal: status.signal(),
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
        timed_out,
        interrupted: interrupted_here,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capped(chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut c = Capped::default();
        for b in chunks {
            c.push(b);
        }
        c.finish()
    }

    #[test]
    fn without_lines_the_cap_is_filled_exactly() {
        let all = vec![b'a'; 3 * OUTPUT_CAP];
        let (kept, cut) = capped(&[&all]);
        assert!(cut);
        assert_eq!(kept.len(), OUTPUT_CAP);
        let text = String::from_utf8(kept).unwrap();
        let marker = text.lines().nth(1).unwrap();
        assert_eq!(
            marker,
            format!(
                "[\u{2026} {} bytes omitted \u{2026}]",
                all.len() - text.len() + marker.len() + 2
            )
        );
    }

    #[test]
    fn up_to_the_cap_everything_is_kept() {
        let all = vec![b'x'; OUTPUT_CAP];
        let (kept, cut) = capped(&[&all[..10], &all[10..]]);
        assert_eq!((kept.len(), cut), (OUTPUT_CAP, false));
    }

    #[test]
    fn beyond_the_cap_head_and_tail_are_kept_on_line_boundaries() {
        let mut all = Vec::new();
        let mut n = 0;
        while all.len() < 3 * OUTPUT_CAP {
            all.extend_from_slice(format!("line {n}\n").as_bytes());
            n += 1;
        }
        all.extend_from_slice(b"SUMMARY: 1 failed\n");
        // Fed in odd chunks, and in one.
        for chunks in [all.chunks(777).collect::<Vec<_>>(), vec![&all[..]]] {
            let (kept, cut) = capped(&chunks);
            assert!(cut);
            let text = String::from_utf8(kept.clone()).unwrap();
            assert!(text.starts_with("line 0\n"));
            assert!(text.ends_with("SUMMARY: 1 failed\n"));
            let marker = text.lines().find(|l| l.contains("bytes omitted")).unwrap();
            let omitted: usize = marker
                .trim_start_matches("[\u{2026} ")
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(kept.len() - marker.len() - 1 + omitted, all.len());
            assert!(kept.len() <= OUTPUT_CAP, "{}", kept.len());
            // Whole lines on both sides of the marker.
            let (before, after) = text.split_once(marker).unwrap();
            assert!(
                before.ends_with('\n') && after.starts_with("\nline "),
                "{after:.20}"
            );
        }
    }
}
