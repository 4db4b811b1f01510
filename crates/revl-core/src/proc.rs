//! Running a child process without a shell: argv only, outputs capped, optional timeout.
//! The sandbox (`crate::sandbox`) hands its prepared [`Command`] to the same loop.

use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Outputs are capped at 1 MiB each (SPEC 2); the rest is read and discarded.
pub const OUTPUT_CAP: usize = 1024 * 1024;

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
}

fn drain<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut cut = false;
        let mut buf = [0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = OUTPUT_CAP.saturating_sub(kept.len());
                    cut |= n > room;
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
        (kept, cut)
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
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args).current_dir(cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_command(cmd, stdin, timeout, &mut || Ok(()))
}

/// Spawn a prepared command with piped outputs, feed it `stdin` (else an empty one), wait
/// for it (killing it at the timeout) and collect its capped outputs. `started` runs once
/// the program is running; if it fails, the command is killed and its error returned.
pub fn run_command(
    cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    started: &mut dyn FnMut() -> std::io::Result<()>,
) -> std::io::Result<Ran> {
    run_command_watched(cmd, stdin, timeout, started, &mut || false)
}

/// [`run_command`], and `stop` is asked about every 100 ms while the command runs: `true`
/// kills it (as a timeout does, without `timed_out`).
pub fn run_command_watched(
    mut cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Option<Duration>,
    started: &mut dyn FnMut() -> std::io::Result<()>,
    stop: &mut dyn FnMut() -> bool,
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
    let out = drain(child.stdout.take().expect("piped stdout"));
    let err = drain(child.stderr.take().expect("piped stderr"));
    if let (Some(data), Some(mut w)) = (stdin, child.stdin.take()) {
        // A child that does not read its stdin must not block us: write from a thread.
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let start = Instant::now();
    let mut last_watch = start;
    let mut timed_out = false;
    let mut nap = Duration::from_micros(200);
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            timed_out = true;
            let _ = child.kill();
            break child.wait()?;
        }
        if last_watch.elapsed() >= Duration::from_millis(100) {
            last_watch = Instant::now();
            if stop() {
                let _ = child.kill();
                break child.wait()?;
            }
        }
        std::thread::sleep(nap);
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
    })
}
