//! The CLI's Ctrl-C: instead of dying mid-step, revl stops the command it is running and
//! records what it had done by then.

use std::sync::atomic::{AtomicUsize, Ordering};

static HANDLER: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_sigint(_: libc::c_int) {
    let f = HANDLER.load(Ordering::SeqCst);
    if f != 0 {
        // SAFETY: `HANDLER` only ever holds a `fn()` stored by `catch_first_sigint`.
        #[allow(unsafe_code)]
        let f = unsafe { std::mem::transmute::<usize, fn()>(f) };
        f();
    }
}

/// Call `note` (which must be async-signal-safe: an atomic store) on the first SIGINT of
/// this process. The handler is reset by that first delivery (`SA_RESETHAND`): a second
/// Ctrl-C ends the process at once.
pub fn catch_first_sigint(note: fn()) {
    catch_first(&[libc::SIGINT], note);
}

/// [`catch_first_sigint`] for each of `signals` (e.g. SIGTERM and SIGHUP too: the program
/// that started revl ending it or going away), each handler reset by its first delivery.
#[allow(unsafe_code)]
pub fn catch_first(signals: &[libc::c_int], note: fn()) {
    HANDLER.store(note as usize, Ordering::SeqCst);
    // SAFETY: installs a handler that performs atomic operations only; the sigaction
    // struct is zeroed and filled before the call, which reads it only.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        for &sig in signals {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}
