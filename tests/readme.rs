//! README's command list and exit-code table keep up with the binary (issue 35: they lagged).

use std::process::Command;

fn readme_section(heading: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README has {heading:?}"));
    let rest = &readme[start + heading.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end].to_owned()
}

fn help() -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .arg("--help")
        .output()
        .expect("run zkcron --help");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn readme_names_every_command_and_every_exit_code_of_the_binary() {
    let section = readme_section("## Commands and exit codes");
    let help = help();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert!(
        commands.len() >= 10,
        "commands read from --help: {commands:?}"
    );
    for command in commands {
        assert!(
            section.contains(&format!("`zkcron {command}"))
                || section.contains(&format!("`{command} ")),
            "README's \"Commands and exit codes\" does not name {command}"
        );
    }
    let codes: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("Exit codes:"))
        .skip(1)
        .filter_map(|line| {
            let code = line.split_whitespace().next()?;
            (line.starts_with("  ") && code.chars().all(|c| c.is_ascii_digit())).then_some(code)
        })
        .collect();
    assert!(codes.len() >= 4, "exit codes read from --help: {codes:?}");
    for code in codes {
        assert!(
            section.contains(&format!("| {code} |")),
            "README's exit-code table lacks {code}"
        );
    }
}

/// The scenario count README and docs/CHAOS.md quote is the suite's (issue 51 §8: it drifted):
/// every `#[tokio::test]` of tests/chaos.rs and its modules but the soak.
#[test]
fn readme_and_the_chaos_doc_count_the_scenarios_the_suite_has() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut files = vec![format!("{root}/tests/chaos.rs")];
    let modules = std::fs::read_dir(format!("{root}/tests/chaos")).expect("tests/chaos/");
    files.extend(
        modules
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.file_name().is_some_and(|name| name != "soak.rs"))
            .map(|path| path.display().to_string()),
    );
    let scenarios: usize = files
        .iter()
        .map(|file| {
            std::fs::read_to_string(file)
                .expect("a chaos file")
                .lines()
                .filter(|line| line.trim_start().starts_with("#[tokio::test"))
                .count()
        })
        .sum();
    assert!(scenarios > 20, "scenarios counted: {scenarios}");
    let said = format!("runs all {scenarios}");
    for doc in ["README.md", "docs/CHAOS.md"] {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).expect("the doc");
        assert!(
            text.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .contains(&said),
            "{doc} says `{said}`"
        );
    }
}
