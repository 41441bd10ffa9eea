//! Prints the guard's verdict for each argument: `cargo run --example guard_check -- 'rm -rf /'`.

fn main() {
    for command in std::env::args().skip(1) {
        let verdict = nestbox_exec::guard::classify(&command);
        println!("{command:?}");
        if verdict.is_clean() {
            println!("  clean");
        }
        for finding in &verdict.findings {
            println!("  {finding}");
            if let Some(key) = finding.approval_key() {
                println!("    approval key: {key}");
            }
        }
    }
}
