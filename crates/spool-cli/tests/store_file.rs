//! The store's file seen from the binary: a store file others can read is opened with
//! a warning (written without colours to a pipe), and a store file deleted while
//! `spool serve` runs stops the server with an error naming it, instead of answering
//! `202` for tasks written to a file nobody can open again.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::Server;

const TOKEN: &str = "store-file-token";

#[test]
fn a_store_others_can_read_is_opened_with_a_warning_without_colours_on_a_pipe() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("shared.spool");
    drop(spool_store::Store::open(&path).expect("a new store"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let output = Command::new(env!("CARGO_BIN_EXE_spool"))
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .arg("inspect")
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .expect("spool inspect runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let warning = format!(
        "WARN spool_store::store::file: the store file {} can be read or written by other \
         users than its owner; it holds every task's input and result: `chmod 600` it \
         path={0} mode=0644",
        path.display()
    );
    assert!(stderr.contains(&warning), "{stderr:?}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// `POST /v1/tasks` of a small agent task: the status, or `None` if the server could
/// not be reached (it may have stopped already).
fn submit(agent: &ureq::Agent, addr: &str) -> Option<u16> {
    agent
        .post(format!("http://{addr}/v1/tasks"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .header("Content-Type", "application/json")
        .send(r#"{"type": "agent", "input": {"prompt": "standup"}}"#)
        .ok()
        .map(|response| response.status().as_u16())
}

#[test]
fn a_store_deleted_while_serving_stops_the_server_with_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = dir.path().join("s.spool");
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("the token file");
    let mut server = Server::start([
        "serve".as_ref(),
        "--addr".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--llm-latency-ms".as_ref(),
        "1".as_ref(),
        "--store".as_ref(),
        store.as_os_str(),
        "--token-file".as_ref(),
        token.as_os_str(),
    ]);
    let agent = support::client(Duration::from_secs(10));
    for _ in 0..3 {
        assert_eq!(submit(&agent, &server.addr), Some(202));
    }
    std::fs::remove_file(&store).expect("the store file is deleted");
    // Every submission after the deletion is refused (or finds the server gone): none
    // is acknowledged.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let answer = submit(&agent, &server.addr);
        assert_ne!(answer, Some(202), "{}", server.log());
        if let Some(status) = server.child.try_wait().expect("the server is waited for") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "spool serve still runs 30 s after its store was deleted; it said:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "{status}: {}", server.log());
    // Its stderr is read on a thread: wait for the last line to reach the log.
    let said = format!(
        "spool serve: the store failed: the journal's sink failed: the store file {} was \
         deleted or replaced while in use: nothing more is written to it. Everything \
         written before (every task acknowledged until now) is in the deleted file, lost \
         when this process ends",
        store.display()
    );
    while !server.log().contains(&said) {
        assert!(
            Instant::now() < deadline,
            "spool serve did not say {said:?}; it said:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
