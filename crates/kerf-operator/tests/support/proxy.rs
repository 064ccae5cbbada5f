//! An API server the test can make slow or failing: `kubectl proxy` (plain HTTP on loopback,
//! authenticating as the operator's ServiceAccount) with a TCP relay in front that the test
//! switches between passing requests on, delaying each of them, and answering every request
//! itself with an error status, as an overloaded or failing API server does. The operator is
//! given a kubeconfig that points at the relay.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{ControlPlane, free_port, wait_for};

/// What the relay does with the requests it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Passes them on.
    Pass,
    /// Holds each request this long before passing it on.
    Slow(Duration),
    /// Answers each with this status (429 with `Retry-After: 1`); connections already open
    /// are cut when this mode starts, watches included.
    Answer(u16),
}

struct Shared {
    mode: Mutex<Mode>,
    open: Mutex<Vec<TcpStream>>,
}

/// The relay and the `kubectl proxy` behind it; both stop when dropped.
pub struct FaultProxy {
    shared: Arc<Shared>,
    kubectl: Child,
    /// A kubeconfig for the operator that reaches the API server through the relay.
    pub kubeconfig: PathBuf,
}

impl FaultProxy {
    /// Starts `kubectl proxy` with `kubeconfig` and the relay in front of it, passing.
    pub fn start(cp: &ControlPlane, kubeconfig: &str) -> FaultProxy {
        let upstream = free_port();
        let kubectl = Command::new("kubectl")
            .args([
                "proxy",
                "--address=127.0.0.1",
                &format!("--port={upstream}"),
            ])
            .env("KUBECONFIG", kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl proxy starts");
        wait_for(
            "kubectl proxy to listen",
            Duration::from_secs(30),
            || TcpStream::connect(("127.0.0.1", upstream)).ok(),
            String::new,
        );
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().expect("relay address").port();
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Pass),
            open: Mutex::new(Vec::new()),
        });
        let relay = Arc::clone(&shared);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let shared = Arc::clone(&relay);
                std::thread::spawn(move || serve(&shared, client, upstream));
            }
        });
        let kubeconfig = cp.dir.join(format!("kubeconfig-relay-{port}"));
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: relay\n  cluster:\n    server: \
             http://127.0.0.1:{port}\nusers:\n- name: relay\n  user: {{}}\ncontexts:\n- name: \
             relay\n  context:\n    cluster: relay\n    user: relay\ncurrent-context: relay\n"
        );
        std::fs::write(&kubeconfig, config).expect("write the relay's kubeconfig");
        FaultProxy {
            shared,
            kubectl,
            kubeconfig,
        }
    }

    /// Switches the relay to `mode`.
    pub fn set(&self, mode: Mode) {
        *self.shared.mode.lock().expect("mode") = mode;
        if matches!(mode, Mode::Answer(_)) {
            for s in self.shared.open.lock().expect("open").drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.kubectl.kill();
        let _ = self.kubectl.wait();
    }
}

fn mode(shared: &Shared) -> Mode {
    *shared.mode.lock().expect("mode")
}

/// One client connection: answered by the relay, or relayed both ways.
fn serve(shared: &Shared, mut client: TcpStream, upstream: u16) {
    if let Mode::Answer(code) = mode(shared) {
        answer(client, code);
        return;
    }
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    {
        let mut open = shared.open.lock().expect("open");
        open.extend(client.try_clone().ok());
        open.extend(server.try_clone().ok());
    }
    let (Ok(mut to_client), Ok(mut from_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let mut to_server = server;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Mode::Slow(delay) = mode(shared) {
            std::thread::sleep(delay);
        }
        if to_server.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to_server.shutdown(Shutdown::Both);
}

/// Reads requests off `client` and answers each with `code` and a Kubernetes Status, until
/// the client hangs up.
fn answer(mut client: TcpStream, code: u16) {
    let reason = match code {
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    };
    let body = format!(
        "{{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"the \
         test's relay answers {code}\",\"reason\":\"{reason}\",\"code\":{code}}}"
    );
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        // the request head, byte by byte (requests are small)
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
        if head.ends_with(b"\r\n\r\n") {
            break;
        }
    }
    // the body too, so that closing does not reset the connection before the answer is read
    let length = String::from_utf8_lossy(&head)
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<u64>().ok())?
        })
        .unwrap_or(0);
    let _ = std::io::copy(&mut (&client).take(length), &mut std::io::sink());
    let response = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nRetry-After: 1\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(response.as_bytes());
    let _ = client.shutdown(Shutdown::Both);
}
