//! Packet loss on the loopback device for the traffic of chosen ports, with `iptables`'
//! `statistic` match: a lossy network between one node and the servers (issue 53). Needs root
//! (`CAP_NET_ADMIN`) and `iptables`; where either is missing, [`Loss::on_ports`] says why and a
//! scenario skips. (`tc netem` would do too, where the kernel has it: this machine's does not.)
//!
//! Owns: one iptables chain of its own while a [`Loss`] lives (removed when it is dropped).
//! Must not: touch any other rule.

use std::process::Command;

/// Loss in force on `lo`; dropping it removes it.
pub struct Loss {
    chain: String,
}

impl Loss {
    /// Drops `percent` % of the packets to or from any of `ports` on `lo`, both ways; other
    /// traffic passes untouched. `Err`: why it cannot be done here.
    pub fn on_ports(ports: &[u16], percent: u32) -> Result<Self, String> {
        let chain = format!("zkcron-loss-{}", std::process::id());
        let probability = f64::from(percent) / 100.0;
        let mut commands = vec![format!("-N {chain}"), format!("-I INPUT -i lo -j {chain}")];
        for port in ports {
            for way in ["--dport", "--sport"] {
                commands.push(format!(
                    "-A {chain} -p tcp {way} {port} -m statistic --mode random --probability {probability} -j DROP"
                ));
            }
        }
        let loss = Self { chain };
        for command in commands {
            iptables(&command)?;
        }
        Ok(loss)
    }
}

impl Drop for Loss {
    fn drop(&mut self) {
        let chain = &self.chain;
        for command in [
            format!("-D INPUT -i lo -j {chain}"),
            format!("-F {chain}"),
            format!("-X {chain}"),
        ] {
            let _ = iptables(&command);
        }
    }
}

fn iptables(command: &str) -> Result<(), String> {
    let output = Command::new("iptables")
        .args(command.split_whitespace())
        .output()
        .map_err(|err| format!("iptables: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {command}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
