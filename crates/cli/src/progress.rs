//! A progress indicator on standard error for long waits (preparing a backend, which may
//! import an image or build a SIF; waiting for a job). Only when standard error is a
//! terminal: never in pipes, logs or under an MCP client, and never on standard output.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Shows `label` and the elapsed seconds after a short delay, until dropped.
pub struct Spinner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Starts the indicator (a no-op unless standard error is a terminal). Nothing is drawn
    /// for waits under a second, so quick commands print nothing extra.
    pub fn start(label: String) -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        // SAFETY: isatty on a descriptor number.
        if unsafe { libc::isatty(2) } != 1 {
            return Spinner { stop, thread: None };
        }
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            let frames = ['|', '/', '-', '\\'];
            let mut drawn = false;
            let mut i = 0;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let elapsed = start.elapsed();
                if elapsed < Duration::from_secs(1) {
                    continue;
                }
                i += 1;
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\r\x1b[2K{} {label} ({}s)",
                    frames[(i / 2) % frames.len()],
                    elapsed.as_secs()
                );
                let _ = err.flush();
                drawn = true;
            }
            if drawn {
                let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
            }
        });
        Spinner {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
