//! The gateway's audit lines: one per connection decision (`class: "network"`) and one per
//! inspected request (`class: "http"`). Field names follow OCSF's Network Activity (4001) and
//! HTTP Activity (4002) where that costs nothing. Never a secret: credentials appear by name,
//! paths without their query, and the request as the client sent it (placeholders, not values).

use serde::Serialize;

use super::identity::AuditCaller;
use crate::audit::Decision;

/// A destination.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Endpoint {
    /// Host as requested.
    pub host: String,
    /// Port.
    pub port: u16,
    /// The address dialed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
}

/// An inspected request.
#[derive(Clone, Debug, Default, Serialize)]
pub struct HttpRequest {
    /// Method.
    pub http_method: String,
    /// Path without the query.
    pub path: String,
    /// `HTTP/1.1` or `HTTP/2`.
    pub version: String,
}

/// Byte counts.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Traffic {
    /// Client to server.
    pub bytes_out: u64,
    /// Server to client.
    pub bytes_in: u64,
}

/// One audit line.
#[derive(Clone, Debug, Serialize)]
pub struct GatewayRecord {
    /// When the connection or request ended (RFC 3339, UTC).
    pub time: String,
    /// `network` or `http`.
    pub class: &'static str,
    /// OCSF class: 4001 (network) or 4002 (HTTP).
    pub class_uid: u32,
    /// Who.
    pub actor: AuditCaller,
    /// The client's address.
    pub src_endpoint: String,
    /// Where to.
    pub dst_endpoint: Endpoint,
    /// Allowed, denied, or failed.
    pub disposition: Decision,
    /// The `X-Nestbox-Denied` reason when refused or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// More words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_detail: Option<String>,
    /// The rules that admitted the connection.
    pub firewall_rule: Vec<String>,
    /// `inspect` or `passthrough`, once decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<&'static str>,
    /// The request (HTTP lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_request: Option<HttpRequest>,
    /// The status the client got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Names of the credentials put into the request (never values).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<String>,
    /// Bytes moved.
    pub traffic: Traffic,
    /// From accept (or request start) to end.
    pub duration_ms: u64,
    /// The policy generation that decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}
