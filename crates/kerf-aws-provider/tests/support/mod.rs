//! moto's server on 127.0.0.1 (scripts/moto-server.py from the venv scripts/python-tools.sh
//! installs), one per test, stopped when dropped, and SDK clients pointed at it.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_ec2::config::{Credentials, Region};

/// The region the tests play in (the seeds' region).
pub const REGION: &str = "ap-northeast-2";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A running moto server.
pub struct Moto {
    child: Child,
    port: u16,
    _dir: TempDir,
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Moto {
    /// Starts moto with these public SSM parameters (name, value) loaded.
    pub fn start(name: &str, ssm_parameters: &[(&str, &str)]) -> Moto {
        let python = Command::new(root().join("scripts/python-tools.sh"))
            .args(["bin", "python"])
            .output()
            .expect("run scripts/python-tools.sh");
        assert!(
            python.status.success(),
            "{}",
            String::from_utf8_lossy(&python.stderr)
        );
        let python = String::from_utf8(python.stdout).expect("a path");
        let dir = std::env::temp_dir().join(format!("kerf-moto-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let parameters: serde_json::Map<String, serde_json::Value> = ssm_parameters
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        let file = dir.join("ssm-parameters.json");
        std::fs::write(&file, serde_json::Value::Object(parameters).to_string())
            .expect("write the parameters");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = std::fs::File::create(dir.join("moto.log")).expect("moto log");
        let child = Command::new(python.trim())
            .arg(root().join("scripts/moto-server.py"))
            .args(["--port", &port.to_string(), "--ssm-parameters"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start moto");
        let moto = Moto {
            child,
            port,
            _dir: TempDir(dir.clone()),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto did not listen on {port} within 30 s: {}",
                std::fs::read_to_string(dir.join("moto.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// An SDK configuration that reaches this server.
    pub async fn config(&self) -> aws_config::SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(kerf_aws_provider::https_client())
            .region(Region::new(REGION))
            .endpoint_url(format!("http://127.0.0.1:{}", self.port))
            .credentials_provider(Credentials::new("test", "test", None, None, "kerf-tests"))
            .load()
            .await
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
