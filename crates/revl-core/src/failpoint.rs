//! Crash points (docs/reference.md, "Crash points"): `REVL_FAILPOINT=NAME[:N]` makes the
//! process abort, as by SIGKILL, at the N-th passage of that point (default 1). `io.enospc`
//! makes the N-th write fail with ENOSPC instead; `wal.torn-append` writes half of the N-th
//! appended record, then aborts; `effect.torn-write` writes half of a small in-place
//! overwrite's bytes, syncs them, then aborts.
//!
//! The core never reads the environment itself: front ends build a [`Failpoints`] (usually
//! with [`Failpoints::from_env`]) and hand it to the store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub struct Failpoints {
    inner: Option<Arc<Armed>>,
}

#[derive(Debug)]
struct Armed {
    name: String,
    nth: u64,
    passes: AtomicU64,
}

impl Failpoints {
    pub fn none() -> Self {
        Failpoints::default()
    }

    /// Parse `NAME[:N]`. An unparsable N is treated as 1.
    pub fn parse(spec: &str) -> Self {
        let spec = spec.trim();
        if spec.is_empty() {
            return Self::none();
        }
        let (name, nth) = match spec.rsplit_once(':') {
            Some((n, k)) if k.chars().all(|c| c.is_ascii_digit()) && !k.is_empty() => {
                (n.to_string(), k.parse().unwrap_or(1).max(1))
            }
            _ => (spec.to_string(), 1),
        };
        Failpoints {
            inner: Some(Arc::new(Armed {
                name,
                nth,
                passes: AtomicU64::new(0),
            })),
        }
    }

    pub fn from_env() -> Self {
        match std::env::var("REVL_FAILPOINT") {
            Ok(s) => Self::parse(&s),
            Err(_) => Self::none(),
        }
    }

    /// Count a passage of `name`; true when this passage is the armed one.
    pub fn fires(&self, name: &str) -> bool {
        match &self.inner {
            Some(a) if a.name == name => a.passes.fetch_add(1, Ordering::SeqCst) + 1 == a.nth,
            _ => false,
        }
    }

    /// A crash point: abort the process here if armed.
    pub fn point(&self, name: &str) {
        if self.fires(name) {
            crash(name);
        }
    }

    /// The `io.enospc` point, passed before each durable write.
    pub fn enospc(&self) -> std::io::Result<()> {
        if self.fires("io.enospc") {
            return Err(std::io::Error::from_raw_os_error(28));
        }
        Ok(())
    }
}

/// Die as by SIGKILL: no unwinding, no destructors, no flush of anything buffered.
pub fn crash(name: &str) -> ! {
    eprintln!("revl: failpoint {name} reached: aborting the process");
    std::process::abort()
}
