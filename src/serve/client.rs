//! A minimal HTTP/1.1 client for `serve`'s own tests, the bench and the
//! end-to-end checks: one request per connection, `Connection: close`, the
//! reply read whole; or a [`Session`] keeping one connection alive. Not a general client (no TLS, no chunked bodies, no
//! redirects): `serve` never sends those.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A reply: status code, headers (names in lower case) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body as text (invalid UTF-8 replaced).
    pub body: String,
    /// The body's bytes.
    pub bytes: Vec<u8>,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Send one request and read the reply.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> io::Result<Reply> {
    request_from(None, addr, method, path, authorization, body).await
}

/// [`request`] from a local address of this machine (`127.0.0.2`: to `serve`,
/// another client than `127.0.0.1`).
pub async fn request_from(
    local: Option<std::net::IpAddr>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> io::Result<Reply> {
    let stage = |what: &'static str| move |e: io::Error| io::Error::new(e.kind(), format!("{what} {addr}: {e}"));
    let mut stream = match local {
        None => TcpStream::connect(addr).await,
        Some(ip) => {
            let socket = if ip.is_ipv4() {
                tokio::net::TcpSocket::new_v4()?
            } else {
                tokio::net::TcpSocket::new_v6()?
            };
            socket.bind(SocketAddr::new(ip, 0))?;
            socket.connect(addr).await
        }
    }
    .map_err(stage("connecting to"))?;
    let request = encode(method, path, addr, authorization, body, "Connection: close\r\n");
    stream.write_all(&request).await.map_err(stage("sending to"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .await
        .map_err(stage("reading the reply from"))?;
    parse_reply(&raw)
}

/// `POST path` with a JSON body.
pub async fn post(addr: SocketAddr, path: &str, authorization: Option<&str>, body: &[u8]) -> io::Result<Reply> {
    request(addr, "POST", path, authorization, body).await
}

/// `GET path`.
pub async fn get(addr: SocketAddr, path: &str) -> io::Result<Reply> {
    request(addr, "GET", path, None, b"").await
}

/// `GET path` with an `Authorization` header.
pub async fn get_as(addr: SocketAddr, path: &str, authorization: &str) -> io::Result<Reply> {
    request(addr, "GET", path, Some(authorization), b"").await
}

/// One kept-alive connection, requests sent one after another on it (as
/// Slurm's jobcomp plugin does through libcurl). The reply's body is read by
/// its `Content-Length`.
pub struct Session {
    addr: SocketAddr,
    stream: tokio::io::BufReader<TcpStream>,
}

impl Session {
    pub async fn connect(addr: SocketAddr) -> io::Result<Session> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Session {
            addr,
            stream: tokio::io::BufReader::new(stream),
        })
    }

    /// `POST path` with a JSON body on this connection.
    pub async fn post(&mut self, path: &str, authorization: Option<&str>, body: &[u8]) -> io::Result<Reply> {
        use tokio::io::AsyncBufReadExt;
        let request = encode("POST", path, self.addr, authorization, body, "");
        self.stream.get_mut().write_all(&request).await?;
        let mut raw = Vec::new();
        let mut length = 0usize;
        loop {
            let start = raw.len();
            if self.stream.read_until(b'\n', &mut raw).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
            let line = String::from_utf8_lossy(&raw[start..]).to_ascii_lowercase();
            if let Some(v) = line.strip_prefix("content-length:") {
                length = v
                    .trim()
                    .parse()
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a bad Content-Length"))?;
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await?;
        raw.extend_from_slice(&body);
        parse_reply(&raw)
    }
}

/// A request's bytes: its head (with `extra` header lines) and body.
fn encode(
    method: &str,
    path: &str,
    addr: SocketAddr,
    authorization: Option<&str>,
    body: &[u8],
    extra: &str,
) -> Vec<u8> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(a) = authorization {
        head.push_str(&format!("Authorization: {a}\r\n"));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    request
}

fn parse_reply(raw: &[u8]) -> io::Result<Reply> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers in the reply"))?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|_| bad("reply headers are not UTF-8"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status in the reply"))?;
    let headers = head
        .split("\r\n")
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let bytes = raw[split + 4..].to_vec();
    Ok(Reply {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        bytes,
    })
}

/// The `Authorization` header value for HTTP Basic.
pub fn basic(user_password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_password)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_whole() {
        let r = parse_reply(b"HTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\n{}\n").unwrap();
        assert_eq!(
            (r.status, r.body.as_str(), r.bytes.as_slice()),
            (201, "{}\n", &b"{}\n"[..])
        );
        assert_eq!(r.header("content-length"), Some("3"));
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\n").is_err());
        assert_eq!(basic("slurm:s3cret"), "Basic c2x1cm06czNjcmV0");
    }
}
