//! The worked example (`examples/gateway-demo.sh`) runs as shipped, so it keeps working.

use std::process::Command;
use std::time::Duration;

use crate::common::{nestbox_bin, output_within, stderr, stdout};

#[test]
fn the_gateway_demo_script_runs_and_shows_the_key_arriving_and_a_refusal() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/gateway-demo.sh"
    );
    let out = output_within(
        Command::new("bash")
            .arg(script)
            .env("NESTBOX", nestbox_bin()),
        Duration::from_secs(120),
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains("the step holds ANTHROPIC_API_KEY=nestbox:resolve:env:ANTHROPIC_API_KEY"),
        "{text}"
    );
    assert!(
        text.contains("\"x-api-key\": \"sk-ant-demo-REAL-KEY-only-the-gateway-holds\""),
        "{text}"
    );
    assert!(
        text.contains("HTTP 403, X-Nestbox-Denied: credential_endpoint_mismatch"),
        "{text}"
    );
    assert!(text.contains("1 request(s) in all"), "{text}");
}
