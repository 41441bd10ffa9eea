//! `nestbox probe`: what the kernel offers, and therefore what `run` will enforce.

use clap::Args;
use nestbox_cage::probe::{FeatureProbe, probe};

#[derive(Args)]
pub struct ProbeArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn yes_no(f: &FeatureProbe) -> String {
    format!("{:<4} {}", if f.available { "yes" } else { "no" }, f.detail)
}

pub fn run(args: ProbeArgs) -> i32 {
    let p = probe();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&p).expect("probe serializes")
        );
        return 0;
    }
    println!("kernel              {} ({})", p.kernel, p.arch);
    if p.landlock.available {
        println!(
            "landlock            yes  ABI {}; TCP port rules: {}; scopes: {}",
            p.landlock.abi,
            if p.landlock.tcp_rules { "yes" } else { "no" },
            if p.landlock.scopes.is_empty() {
                "none".to_string()
            } else {
                p.landlock.scopes.join(", ")
            }
        );
    } else {
        println!("landlock            no   {}", p.landlock.detail);
    }
    println!("seccomp             {}", yes_no(&p.seccomp));
    println!("user namespaces     {}", yes_no(&p.user_namespaces));
    println!("network namespaces  {}", yes_no(&p.network_namespaces));
    println!("io_uring            {}", yes_no(&p.io_uring));
    println!("x32 syscalls        {}", yes_no(&p.x32));
    println!("i386 int 0x80       {}", yes_no(&p.ia32));
    println!();
    if p.run_will.missing.is_empty() {
        println!(
            "nestbox run will enforce the full cage (Landlock fs, TCP and scopes; seccomp filter)."
        );
    } else {
        println!(
            "nestbox run will REFUSE to run (fail closed): missing {}. With --best-effort it runs without them and reports it.",
            p.run_will.missing.join(", ")
        );
    }
    println!(
        "steps with network access will use {} mode.",
        p.run_will.network_mode
    );
    0
}
