//! `cargo run -p spool-modules [-- CRATE…]`: prints every cycle among sibling modules in
//! the workspace's crates (all of `crates/` without arguments), and every import through
//! spool-core's crate root; exits 1 if there is any.

use std::path::PathBuf;
use std::process::ExitCode;

use spool_modules::Crate;

fn main() -> ExitCode {
    let crates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut names: Vec<String> = std::env::args().skip(1).collect();
    if names.is_empty() {
        names = match spool_modules::workspace_crates(&crates) {
            Ok(names) => names,
            Err(error) => {
                eprintln!("spool-modules: {}: {error}", crates.display());
                return ExitCode::FAILURE;
            }
        };
    }
    let mut problems = 0;
    for name in names {
        let krate = match Crate::load(&crates.join(&name)) {
            Ok(krate) => krate,
            Err(error) => {
                eprintln!("spool-modules: {error}");
                return ExitCode::FAILURE;
            }
        };
        for cycle in krate.sibling_cycles() {
            problems += 1;
            print!("{cycle}");
        }
        if name == "spool-core" {
            for import in krate.root_imports() {
                problems += 1;
                println!("{import}");
            }
        }
    }
    if problems == 0 {
        println!("no cycle among sibling modules; spool-core imports from defining modules");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
