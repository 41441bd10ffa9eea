//! Cloud metadata endpoints hand out credentials: refused by literal, by name, by plain HTTP,
//! and not opened by a range entry. (No packet is ever sent to them: the control case checks
//! the allowlist decision, not a connection.)

use nestbox_policy::{AddrClass, AddrVerdict, Allowlist, Origin, RequestKind, RuleSource};

use crate::support::{Relay, assert_refused};

#[test]
fn relay_refuses_connect_to_metadata_address() {
    let relay = Relay::builder()
        .allow("169.254.0.0/16:80")
        .allow("md.test:80")
        .allow("[fd00:ec2::/32]:*")
        .resolve("md.test=169.254.169.254")
        .start();
    // a range entry covering the address does not open it
    let (_s, r) = relay.connect_to("169.254.169.254:80");
    let v = assert_refused(&r, 403, "metadata_address");
    assert!(v["allow"].as_str().unwrap().contains("exactly"), "{v}");
    // nor does a listed name resolving there
    let (_s, r) = relay.connect_to("md.test:80");
    assert_refused(&r, 403, "metadata_address");
    // plain HTTP, the usual way to ask the metadata service
    let (_s, r) = relay.send(b"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\n\r\n");
    assert_refused(&r, 403, "metadata_address");
    // AWS's IPv6 endpoint, and Alibaba's
    let (_s, r) = relay.connect_to("[fd00:ec2::254]:80");
    assert_refused(&r, 403, "metadata_address");
    let (_s, r) = relay.connect_to("100.100.100.200:80");
    assert_refused(&r, 403, "ip_literal_not_allowed");
}

#[test]
fn metadata_address_opens_only_for_an_entry_naming_it_exactly() {
    // control (a decision, not a connection: nothing may be sent to a metadata address here)
    let mut list = Allowlist::new();
    list.allow_text(
        "169.254.169.254:80",
        RuleSource::Entry(Origin::Flag("--allow")),
    )
    .unwrap();
    let md = "169.254.169.254".parse().unwrap();
    assert!(matches!(
        list.check_addr(md, 80, RequestKind::PlainHttp),
        AddrVerdict::Opened(AddrClass::Metadata, _)
    ));
}
