//! `zkcron acl apply`: the schedule's ACL given to the nodes already there, through the command
//! door (`zkcron::command`), which records it in the audit trail.
//!
//! Owns: the subcommand's arguments and the text or JSON of what it did.
//! Must not: walk ZooKeeper itself (`zkcron::ledger::acl` does).

use clap::Subcommand;

use super::document::print_document;
use super::error::{CliError, print_lines};
use super::steer::{act, mismatched};
use zkcron::command::{Command, Door, Outcome};
use zkcron::config::Config;

#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Set the ACL on the lock group's directory and every node under it, where it differs.
    Apply {
        /// One JSON document instead of text: `{"format": 1, "dir", "acl", "nodes", "changed",
        /// "gone", "refused": [{"path", "error"}]}`.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(config: &Config, command: AclCommand) -> Result<(), CliError> {
    let AclCommand::Apply { json } = command;
    let door = Door::connect(config).await?;
    let Outcome::AclApplied(applied) = act(&door, Command::ApplyAcl).await? else {
        return Err(mismatched());
    };
    let dir = config.lock.paths().dir;
    if json {
        let refused: Vec<serde_json::Value> = applied
            .refused
            .iter()
            .map(|(path, fault)| serde_json::json!({"path": path, "error": fault.to_string()}))
            .collect();
        print_document(
            1,
            serde_json::json!({
                "dir": dir,
                "acl": applied.acl,
                "nodes": applied.nodes,
                "changed": applied.changed,
                "gone": applied.gone,
                "refused": refused,
            }),
        )?;
    } else {
        for (path, fault) in &applied.refused {
            eprintln!("zkcron: {path}: the ACL cannot be set: {fault}");
        }
        print_lines(&[format!(
            "{dir}: the ACL {} given to {} of {} node(s) (the others had it); {} deleted \
             meanwhile, {} refused",
            applied.acl,
            applied.changed,
            applied.nodes,
            applied.gone,
            applied.refused.len()
        )])?;
    }
    if applied.refused.is_empty() {
        Ok(())
    } else {
        Err(CliError::AclRefused {
            nodes: applied.refused.len(),
        })
    }
}
