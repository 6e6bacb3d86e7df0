//! One TLS handshake of our own, to say why the ZooKeeper client could not connect: it reports
//! any handshake failure as a timeout after a whole session timeout.
//!
//! Owns: a blocking handshake with the configured CA and identity (rustls, the client's own TLS
//! stack and crypto provider), and the reason it fails, in words.
//! Also the client's TLS options from the PEM texts (`crate::ensemble::TlsFiles`).
//! Must not: be used to talk to ZooKeeper: the connection is dropped after the handshake.

use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

use crate::ensemble::TlsFiles;

/// The client's TLS options from the PEM texts.
///
/// # Errors
/// A text is not PEM the client can use; the message says which.
pub(super) fn options(tls: &TlsFiles) -> Result<zookeeper_client::TlsOptions, String> {
    let options = zookeeper_client::TlsOptions::new()
        .with_pem_ca(&tls.ca)
        .map_err(|err| format!("the CA file holds no usable PEM certificate: {err}"))?;
    match &tls.identity {
        Some((cert, key)) => options
            .with_pem_identity(cert, key.expose())
            .map_err(|err| format!("the certificate and key are not a usable PEM pair: {err}")),
        None => Ok(options),
    }
}

/// How long the handshake, and the wait for a late rejection after it, may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a handshake with `host` (`host:port`) fails; `None` when it succeeds (or cannot be tried).
pub(super) fn handshake_error(tls: &TlsFiles, host: &str) -> Option<String> {
    let config = tls.client_config().ok()?;
    let (name, _) = host.rsplit_once(':')?;
    let name = ServerName::try_from(name.trim_matches(['[', ']']).to_owned()).ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let address = host.to_socket_addrs().ok()?.next()?;
    let mut socket = TcpStream::connect_timeout(&address, HANDSHAKE_TIMEOUT).ok()?;
    socket.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).ok()?;
    socket.set_write_timeout(Some(HANDSHAKE_TIMEOUT)).ok()?;
    while conn.is_handshaking() {
        if let Err(err) = conn.complete_io(&mut socket) {
            return Some(describe(&err));
        }
    }
    // TLS 1.3: a server that refuses our certificate says so only after the handshake, as an
    // alert; a ZooKeeper server that accepts us just waits for our first request.
    let mut stream = rustls::Stream::new(&mut conn, &mut socket);
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Err(err)
            if !matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Some(describe(&err))
        }
        _ => None,
    }
}

fn describe(err: &std::io::Error) -> String {
    match err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(why)) => {
            format!("the server's certificate is not accepted ({why:?})")
        }
        Some(rustls::Error::AlertReceived(alert)) => {
            format!("the server refused this node's certificate (alert {alert:?})")
        }
        Some(other) => other.to_string(),
        None => err.to_string(),
    }
}
