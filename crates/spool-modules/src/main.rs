//! `cargo run -p spool-modules [-- CRATE…]`: prints every cycle among sibling modules in
//! the workspace's crates (all of `crates/` without arguments), and every import through
//! spool-core's crate root; exits 1 if there is any.
//!
//! `cargo run -p spool-modules -- --edges CRATE [PARENT]`: prints which children of
//! `PARENT` (`crate` by default, or `crate::scheduler`, …) reach which.

use std::path::PathBuf;
use std::process::ExitCode;

use spool_modules::Crate;

fn main() -> ExitCode {
    let crates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut names: Vec<String> = std::env::args().skip(1).collect();
    if names.first().is_some_and(|a| a == "--edges") {
        return print_edges(&crates, &names[1..]);
    }
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

/// Prints the edges among the children of one module: `CRATE [PARENT]`.
fn print_edges(crates: &std::path::Path, args: &[String]) -> ExitCode {
    let [name, rest @ ..] = args else {
        eprintln!("spool-modules: --edges CRATE [PARENT]");
        return ExitCode::from(2);
    };
    let parent = rest.first().map_or("crate", String::as_str);
    let krate = match Crate::load(&crates.join(name)) {
        Ok(krate) => krate,
        Err(error) => {
            eprintln!("spool-modules: {error}");
            return ExitCode::FAILURE;
        }
    };
    let Some(edges) = krate.sibling_edges(parent) else {
        eprintln!("spool-modules: {name} has no module {parent}");
        return ExitCode::FAILURE;
    };
    for edge in edges {
        println!("{} -> {} ({} uses)", edge.from, edge.to, edge.because.len());
    }
    ExitCode::SUCCESS
}
