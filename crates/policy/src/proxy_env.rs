//! The environment that sends a step's clients through its relay. Every common HTTP client
//! (curl, pip, npm, cargo, git, Go, Python's `requests`) reads one spelling or the other of
//! these variables, so a step gets both; the cell and the container backend use the same set.

/// Every variable a client reads to find its proxy, in both spellings: what a step must not
/// inherit from the launcher (its relay decides the way out, not the caller's proxy).
pub const PROXY_VARS: &[&str] = &[
    "https_proxy",
    "HTTPS_PROXY",
    "http_proxy",
    "HTTP_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
];

/// True when `name` is one of [`PROXY_VARS`].
pub fn is_proxy_var(name: &[u8]) -> bool {
    PROXY_VARS.iter().any(|p| name == p.as_bytes())
}

/// The variables that point a step at a relay listening on `127.0.0.1:port`; its own
/// loopback services (a test server it starts) are reached directly.
pub fn relay_env(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    PROXY_VARS
        .iter()
        .map(|k| {
            let value = if k.eq_ignore_ascii_case("no_proxy") {
                "localhost,127.0.0.1,::1".to_string()
            } else {
                url.clone()
            };
            (k.to_string(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_gets_every_spelling_pointing_at_its_relay_and_loopback_kept_direct() {
        let env = relay_env(4242);
        assert_eq!(env.len(), PROXY_VARS.len());
        for (k, v) in &env {
            assert!(is_proxy_var(k.as_bytes()), "{k}");
            let want = if k.eq_ignore_ascii_case("no_proxy") {
                "localhost,127.0.0.1,::1"
            } else {
                "http://127.0.0.1:4242"
            };
            assert_eq!(v, want, "{k}");
        }
        assert!(!is_proxy_var(b"PATH"));
        assert!(
            !is_proxy_var(b"Https_Proxy"),
            "clients read only the two spellings"
        );
    }
}
