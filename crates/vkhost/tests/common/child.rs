//! Child processes for tests that run a program and judge its exit status and stderr.

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// This test binary, set to run the test `name` alone (exact name, one thread, output not
/// captured): for tests that run a scenario in a child process of their own.
pub fn this_test(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
    cmd.args([name, "--exact", "--test-threads=1", "--nocapture"]);
    cmd
}

/// Spawns `cmd` with stderr piped (read on a thread meanwhile, so that a chatty child cannot
/// block on a full pipe) and waits at most `limit`: its exit status and stderr, or `None` if it
/// ran past `limit` (then it is killed and reaped).
pub fn run_with_stderr(cmd: &mut Command, limit: Duration) -> Option<(ExitStatus, String)> {
    use std::io::Read;
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn the child process");
    let mut pipe = child.stderr.take().expect("the child's stderr");
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for the child process") {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = reader.join().expect("the stderr reader");
    status.map(|st| (st, err))
}
