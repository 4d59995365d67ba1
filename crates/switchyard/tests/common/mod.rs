//! What the process tests share: starting the built binary.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

/// Starts `switchyard <args>` and returns it with the URL from its "listening on" line;
/// its log goes to the test's standard error.
pub async fn start(args: &[&str], env: &[(&str, &str)]) -> (Child, String) {
    let (child, url, _) = launch(args, env, false).await;
    (child, url)
}

/// What a process wrote to its standard output and error, line by line.
pub type Lines = Arc<Mutex<Vec<String>>>;

/// [`start`], keeping every line the process writes (its log included).
#[allow(
    dead_code,
    reason = "shared by the process tests; not every test binary reads a log"
)]
pub async fn start_logged(args: &[&str], env: &[(&str, &str)]) -> (Child, String, Lines) {
    launch(args, env, true).await
}

async fn launch(args: &[&str], env: &[(&str, &str)], keep_log: bool) -> (Child, String, Lines) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.args(args)
        .env("SWITCHYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(if keep_log {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let kept = Lines::default();
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(drain(stderr, Arc::clone(&kept)));
    }
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            kept.lock().unwrap().push(line.clone());
            if let Some(at) = line.find("listening on ") {
                return line[at + "listening on ".len()..].trim().to_owned();
            }
        }
        panic!("{args:?} exited before listening");
    })
    .await
    .expect("no listening line within 30 s");
    // Keep draining stdout so the process never blocks on a full pipe.
    tokio::spawn(drain(lines.into_inner(), Arc::clone(&kept)));
    (child, url, kept)
}

/// Reads `from` to its end into `into`, line by line.
async fn drain(from: impl AsyncRead + Unpin, into: Lines) {
    let mut lines = BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        into.lock().unwrap().push(line);
    }
}
