//! A user's logger that panics on a chosen line: a panicking user callback inside vkhost, armed
//! per thread (tests/unwind.rs, tests/unwind_sweep.rs).

use std::cell::Cell;
use std::sync::Once;

/// The message every panic of this logger starts with.
pub const PANIC_PREFIX: &str = "user logger panicked";

thread_local! {
    /// `Some((level, n))`: panic on the n-th (0-based) line from now at `level` or worse.
    static ARMED: Cell<Option<(log::Level, u32)>> = const { Cell::new(None) };
    /// Lines at Warn or worse logged on this thread since the last `reset_lines`.
    static LINES: Cell<u32> = const { Cell::new(0) };
}

struct PanicLogger;

impl log::Log for PanicLogger {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        if r.level() > log::Level::Warn {
            return;
        }
        let i = LINES.with(|l| {
            let i = l.get();
            l.set(i + 1);
            i
        });
        if std::env::var_os("VKHOST_SWEEP_LOG").is_some() {
            eprintln!("  log #{i} [{}] {}", r.level(), r.args());
        }
        match ARMED.with(Cell::get) {
            Some((level, 0)) if r.level() <= level => {
                ARMED.with(|a| a.set(None));
                panic!("{PANIC_PREFIX} on: {}", r.args());
            }
            Some((level, n)) if r.level() <= level => ARMED.with(|a| a.set(Some((level, n - 1)))),
            _ => {}
        }
    }
    fn flush(&self) {}
}

/// Makes this logger the process's (once), at Warn; its own panics do not print (they are
/// expected), others still do.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_boxed_logger(Box::new(PanicLogger)).unwrap();
        log::set_max_level(log::LevelFilter::Warn);
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !is_logger_panic(info.payload()) {
                prev(info);
            }
        }));
    });
}

/// From now on this thread's logger panics on its `n`-th (0-based) line at `level` or worse.
pub fn arm(level: log::Level, n: u32) {
    ARMED.with(|a| a.set(Some((level, n))));
}

/// This thread's logger panics no more.
pub fn disarm() {
    ARMED.with(|a| a.set(None));
}

/// Starts this thread's count of lines at Warn or worse again.
pub fn reset_lines() {
    LINES.with(|l| l.set(0));
}

/// Lines at Warn or worse this thread logged since `reset_lines`.
pub fn lines() -> u32 {
    LINES.with(Cell::get)
}

/// Whether a panic's payload is this logger's.
pub fn is_logger_panic(payload: &(dyn std::any::Any + Send)) -> bool {
    let msg = payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied());
    msg.is_some_and(|m| m.starts_with(PANIC_PREFIX))
}
