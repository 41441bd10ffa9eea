//! Our own command line as others see it in `/proc/PID/cmdline`. A proxy URL given with a
//! password (`--upstream http://user:secret@host:port`) would be readable there by every
//! process of the machine, a shared-PID step included; the password is blanked in place.

/// Overwrites, with `*`, every occurrence of the password of `url` (if it has one) in this
/// process's argument area.
pub fn blank_password(url: &str) {
    let Some(password) = password_of(url) else {
        return;
    };
    let Some((start, end)) = arg_area() else {
        return;
    };
    let needle = password.as_bytes();
    // SAFETY: [start, end) is this process's own argument area (from /proc/self/stat); it is
    // mapped and writable (it lies in the initial stack), and nothing else reads it concurrently
    // (the launcher is single-threaded).
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
    let mut i = 0;
    while i + needle.len() <= area.len() {
        if &area[i..i + needle.len()] == needle {
            area[i..i + needle.len()].fill(b'*');
            i += needle.len();
        } else {
            i += 1;
        }
    }
}

/// The password in `scheme://user:password@host...`, when there is one.
fn password_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split(['/', '?', '#']).next()?.rsplit_once('@')?.0;
    let password = userinfo.split_once(':')?.1;
    (!password.is_empty()).then_some(password)
}

/// `arg_start` and `arg_end` (fields 48 and 49 of `/proc/self/stat`).
fn arg_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    let start: usize = fields.get(45)?.parse().ok()?;
    let end: usize = fields.get(46)?.parse().ok()?;
    (end > start).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_only_where_there_is_one() {
        assert_eq!(
            password_of("http://agent:s3cret@127.0.0.1:3128"),
            Some("s3cret")
        );
        assert_eq!(password_of("http://agent@127.0.0.1:3128"), None);
        assert_eq!(password_of("http://127.0.0.1:3128/x@y"), None);
        assert_eq!(password_of("not a url"), None);
    }
}
