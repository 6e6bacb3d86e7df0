//! Who acts, as far as it can be known, and how each part is known (issue 51): from a command
//! line or a program, the account of the process's real uid and the login behind it; through
//! the HTTP API or the console, the token that proved the right and the peer's address; and
//! for every action, the identity the ZooKeeper servers verified for the session that wrote it.
//!
//! Owns: finding those parts (`getuid`, `/proc/self/loginuid`, the account database) and
//! showing them in one line.
//! Must not: take an environment variable as proof: `$USER` and `$LOGNAME` are whatever the
//! caller set and are never read; `$SUDO_USER` is kept only as a hint, labelled unverified.

use serde::{Deserialize, Serialize};

/// `/proc/self/loginuid` when no login set it (a service, a container's shell).
const NO_LOGIN: u32 = u32::MAX;

/// Where the kernel keeps the uid a session logged in as; `sudo` and `su` leave it alone.
const LOGIN_UID: &str = "/proc/self/loginuid";

/// How an actor is known, part by part; a part that could not be found is absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Who {
    /// The account of the process's real uid (the kernel's word), `uid N` when the account
    /// database has no name for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// The account the session logged in as, where it is not `account` (`sudo`, `su`): the
    /// kernel's loginuid, which neither changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login: Option<String>,
    /// `$SUDO_USER`: sudo sets it, but so can anyone: a hint, never proof.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sudo_user_unverified: Option<String>,
    /// The host the command ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The named HTTP token that proved the right to act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The HTTP request's peer address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The name an HTTP request gave for itself (`X-Zkcron-Actor`, the console's user): shown
    /// beside what proved the right, never instead of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_unverified: Option<String>,
    /// The identity the ZooKeeper servers verified for the session that wrote the action:
    /// `digest:<user>`, `sasl:<user>`, `x509:sha256:<certificate fingerprint>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zookeeper: Option<String>,
}

impl Who {
    /// Nothing known (an entry written before these parts were kept).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// This process: its real uid's account, the login behind it where it differs, `$SUDO_USER`
    /// as a hint, and the host.
    pub fn this_process() -> Self {
        let uid = nix::unistd::getuid().as_raw();
        let logged_in = std::fs::read_to_string(LOGIN_UID)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok());
        let sudo_user = std::env::var("SUDO_USER").ok();
        Self::of_process(uid, logged_in, sudo_user, account_of)
    }

    /// [`Who::this_process`] from what it reads: the real uid, the loginuid, `$SUDO_USER`,
    /// and the account database.
    fn of_process(
        uid: u32,
        logged_in: Option<u32>,
        sudo_user: Option<String>,
        account_of: impl Fn(u32) -> String,
    ) -> Self {
        let account = account_of(uid);
        let login = logged_in
            .filter(|login| *login != NO_LOGIN && *login != uid)
            .map(&account_of);
        let sudo_user_unverified = sudo_user
            .map(|user| user.trim().to_owned())
            .filter(|user| !user.is_empty() && *user != account);
        Self {
            account: Some(account),
            login,
            sudo_user_unverified,
            host: Some(gethostname::gethostname().to_string_lossy().into_owned()),
            ..Self::default()
        }
    }

    /// An HTTP request: the named token that proved the right (none for the one write token
    /// or an open read), its peer, and the name it gave for itself.
    pub fn http(token: Option<String>, peer: std::net::IpAddr, name: Option<String>) -> Self {
        Self {
            token,
            peer: Some(peer.to_string()),
            name_unverified: name.filter(|name| !name.is_empty()),
            ..Self::default()
        }
    }

    /// In one line, what proved it first: `alice@h1`; `alice via sudo as root@h1` (a login
    /// and `$SUDO_USER` agree); `alice as root@h1`; `token:deploy from 10.0.0.7`;
    /// `http:10.0.0.7`; a name a request gave goes before them, `alice (token:deploy from
    /// 10.0.0.7)`. The ZooKeeper identity is not in it: it is the session's, shown apart.
    pub fn shown(&self) -> String {
        let proven = match (&self.account, &self.token, &self.peer) {
            (Some(account), _, _) => {
                let me = match &self.host {
                    Some(host) => format!("{account}@{host}"),
                    None => account.clone(),
                };
                match (&self.login, &self.sudo_user_unverified) {
                    (Some(login), Some(sudo)) if login == sudo => {
                        format!("{login} via sudo as {me}")
                    }
                    (Some(login), _) => format!("{login} as {me}"),
                    (None, Some(sudo)) => format!("{me} (SUDO_USER={sudo}, unverified)"),
                    (None, None) => me,
                }
            }
            (None, Some(token), Some(peer)) => format!("token:{token} from {peer}"),
            (None, Some(token), None) => format!("token:{token}"),
            (None, None, Some(peer)) => format!("http:{peer}"),
            (None, None, None) => "unknown".to_owned(),
        };
        match &self.name_unverified {
            Some(name) => format!("{name} ({proven})"),
            None => proven,
        }
    }
}

/// The account database's name for `uid`, or `uid N`.
fn account_of(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => user.name,
        _ => format!("uid {uid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accounts(uid: u32) -> String {
        match uid {
            0 => "root".to_owned(),
            1000 => "alice".to_owned(),
            other => format!("uid {other}"),
        }
    }

    fn shown(uid: u32, login: Option<u32>, sudo: Option<&str>) -> String {
        let mut who = Who::of_process(uid, login, sudo.map(str::to_owned), accounts);
        who.host = Some("h1".to_owned());
        who.shown()
    }

    #[test]
    fn the_account_of_the_real_uid_names_a_command_line_and_the_login_behind_sudo_is_kept() {
        assert_eq!(shown(1000, Some(1000), None), "alice@h1");
        assert_eq!(shown(1000, Some(NO_LOGIN), None), "alice@h1");
        assert_eq!(
            shown(0, Some(1000), Some("alice")),
            "alice via sudo as root@h1"
        );
        // su, or a sudo that scrubbed its variables: the login still shows.
        assert_eq!(shown(0, Some(1000), None), "alice as root@h1");
        // A variable names nobody: it is a hint, labelled.
        assert_eq!(
            shown(0, Some(NO_LOGIN), Some("mallory")),
            "root@h1 (SUDO_USER=mallory, unverified)"
        );
        assert_eq!(shown(4242, None, None), "uid 4242@h1");
        assert_eq!(shown(1000, None, Some("alice")), "alice@h1");
    }

    #[test]
    fn an_http_request_is_named_by_what_proved_it_and_its_own_name_goes_beside() {
        let peer: std::net::IpAddr = [10, 0, 0, 7].into();
        assert_eq!(
            Who::http(Some("deploy".into()), peer, None).shown(),
            "token:deploy from 10.0.0.7"
        );
        assert_eq!(Who::http(None, peer, None).shown(), "http:10.0.0.7");
        assert_eq!(
            Who::http(None, peer, Some("alice".into())).shown(),
            "alice (http:10.0.0.7)"
        );
    }

    #[test]
    fn the_parts_round_trip_and_an_entry_without_them_reads_as_nothing_known() {
        let who = Who {
            zookeeper: Some("digest:ops".into()),
            ..Who::of_process(0, Some(1000), Some("alice".into()), accounts)
        };
        let text = serde_json::to_string(&who).unwrap_or_default();
        assert_eq!(serde_json::from_str::<Who>(&text).ok(), Some(who));
        assert!(serde_json::from_str::<Who>("{}").is_ok_and(|who| who.is_empty()));
    }
}
