//! The official MCP Python SDK against `nestbox mcp --backend local` (the cage).

use crate::*;

fn work() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn the_python_sdk_initializes_and_lists_the_run_and_process_tools() {
    let w = work();
    let seen = python_client("handshake", w.path(), &["--backend", "local"]);
    let init = step(&seen, "initialize");
    assert_eq!(init["serverInfo"]["name"], "nestbox");
    assert_eq!(init["capabilities"]["tools"]["listChanged"], false);
    let tools = step(&seen, "tools")["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["run", "process"]);
    assert_eq!(tools[0]["inputSchema"]["required"][0], "command");
    assert_eq!(
        tools[1]["inputSchema"]["properties"]["action"]["enum"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    assert_eq!(step(&seen, "ping"), "ok");
}

#[test]
fn a_run_through_the_python_sdk_is_caged_and_reports_both_streams() {
    let w = work();
    let seen = python_client("run", w.path(), &["--backend", "local"]);
    let r = step(&seen, "caged");
    assert_eq!(r["isError"], false);
    let s = &r["structuredContent"];
    assert_eq!(s["exit_code"], 0);
    assert_eq!(s["stdout"]["text"], "hello\nrc=1\n");
    assert!(
        s["stderr"]["text"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{s}"
    );
    assert_eq!(s["approval"], "clean");
    // The text block carries the same record, for clients that read only text.
    let text: serde_json::Value =
        serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&text, s);
}

#[test]
fn a_dangerous_command_comes_back_as_a_tool_error_naming_the_rule() {
    let w = work();
    let seen = python_client("run", w.path(), &["--backend", "local"]);
    let r = step(&seen, "refused");
    assert_eq!(r["isError"], true);
    let refused = &r["structuredContent"]["refused"];
    assert_eq!(refused["cause"]["kind"], "hardline");
    assert_eq!(refused["findings"][0]["id"], "rm.recursive_root");
    assert_eq!(
        refused["findings"][0]["matched"],
        "sudo rm -rf --no-preserve-root /"
    );
    assert!(
        refused["findings"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("root file system")
    );

    let r = step(&seen, "needs_approval");
    assert_eq!(r["isError"], true);
    assert_eq!(
        r["structuredContent"]["refused"]["cause"]["kind"],
        "needs_approval"
    );
    assert_eq!(
        r["structuredContent"]["refused"]["findings"][0]["id"],
        "git.force_push"
    );

    let r = step(&seen, "bad_args");
    assert_eq!(r["isError"], true);
    assert_eq!(r["structuredContent"]["error"], "invalid_arguments");
}

#[test]
fn a_background_job_is_polled_to_completion_read_listed_and_killed() {
    let w = work();
    let seen = python_client("background", w.path(), &["--backend", "local"]);
    let job = step(&seen, "spawn")["structuredContent"]["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let last_poll = &seen.iter().rev().find(|s| s.step == "poll").unwrap().value;
    assert_eq!(last_poll["structuredContent"]["state"], "finished");
    assert_eq!(last_poll["structuredContent"]["exit_code"], 0);
    let log = &step(&seen, "log")["structuredContent"];
    assert_eq!(log["data"], "tick 1\ntick 2\ntick 3\n");
    assert_eq!(log["complete"], true);
    let jobs = &step(&seen, "list")["structuredContent"]["jobs"];
    assert_eq!(jobs[0]["id"], job.as_str());
    assert_eq!(jobs[0]["status"]["state"], "finished");
    assert_eq!(
        step(&seen, "wait_short")["structuredContent"]["state"],
        "running"
    );
    let killed = &step(&seen, "kill")["structuredContent"];
    assert_eq!(killed["state"], "finished");
    assert_eq!(killed["killed"], true);
}
