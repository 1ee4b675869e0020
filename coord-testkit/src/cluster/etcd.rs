//! etcd clusters: each member's command line, `etcdctl` against a member, leadership
//! and compaction.

use super::*;

pub(super) fn etcd_argv(
    dir: &Path,
    i: usize,
    members: &[MemberSpec],
    options: &ClusterOptions,
    cluster_dir: &Path,
) -> Vec<String> {
    let me = &members[i];
    let scheme = if options.tls.is_some() { "https" } else { "http" };
    let initial: Vec<String> = members
        .iter()
        .enumerate()
        .map(|(n, m)| format!("m{n}=http://127.0.0.1:{}", m.peer_port))
        .collect();
    // Short heartbeats so 1–2 s leases work; a cluster's election timeout leaves room
    // for a busy machine.
    let election = if members.len() > 1 { "500" } else { "250" };
    let mut argv: Vec<String> = vec![
        "etcd".into(),
        "--name".into(),
        format!("m{i}"),
        "--data-dir".into(),
        dir.join("data").display().to_string(),
        "--listen-client-urls".into(),
        format!("{scheme}://127.0.0.1:{}", me.client_port),
        "--advertise-client-urls".into(),
        format!("{scheme}://127.0.0.1:{}", me.client_port),
        "--listen-peer-urls".into(),
        format!("http://127.0.0.1:{}", me.peer_port),
        "--initial-advertise-peer-urls".into(),
        format!("http://127.0.0.1:{}", me.peer_port),
        "--initial-cluster".into(),
        initial.join(","),
        "--initial-cluster-token".into(),
        cluster_dir.display().to_string(),
        "--unsafe-no-fsync".into(),
        "--logger".into(),
        "zap".into(),
        "--log-level".into(),
        "error".into(),
    ];
    if !options.server_defaults {
        argv.extend([
            "--heartbeat-interval".into(),
            "50".into(),
            "--election-timeout".into(),
            election.into(),
        ]);
    }
    if let Some(certs) = &options.tls {
        for (flag, file) in [
            ("--cert-file", "server.pem"),
            ("--key-file", "server.key"),
            ("--trusted-ca-file", "ca.pem"),
        ] {
            argv.push(flag.into());
            argv.push(certs.join(file).display().to_string());
        }
        argv.push("--client-cert-auth".into());
    }
    argv.extend(options.extra.iter().cloned());
    argv
}

impl Cluster {
    pub(super) fn etcdctl(&self, i: usize, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.addr(i).to_string())
            .args(["--dial-timeout", "1s", "--command-timeout", "2s"]);
        if let Some(certs) = &self.state.tls {
            cmd.arg("--cacert")
                .arg(certs.join("ca.pem"))
                .arg("--cert")
                .arg(certs.join("client.pem"))
                .arg("--key")
                .arg(certs.join("client.key"));
        }
        let out = cmd
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| err(format!("cannot run etcdctl: {e}")))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(err(String::from_utf8_lossy(&out.stderr).trim().to_owned()))
        }
    }

    /// Compacts an etcd cluster's history up to its current revision and returns that
    /// revision: a watch that resumes from an older revision then finds its history
    /// gone (it must report a gap, not skip it). ZooKeeper keeps no such history.
    ///
    /// # Errors
    ///
    /// On ZooKeeper; when no member answers or `etcdctl` fails.
    pub fn compact(&self) -> Result<u64> {
        if self.kind() != Kind::Etcd {
            return Err(err("only etcd keeps a history to compact"));
        }
        let mut last = err("no member is up");
        for i in (0..self.len()).filter(|&i| self.pid(i).is_some()) {
            let revision = self
                .etcdctl(i, &["endpoint", "status", "-w", "json"])
                .and_then(|out| {
                    serde_json::from_str::<serde_json::Value>(&out)
                        .map_err(|e| err(format!("etcdctl endpoint status: {e}")))
                })
                .and_then(|v| {
                    v[0]["Status"]["header"]["revision"]
                        .as_u64()
                        .ok_or_else(|| err("etcdctl endpoint status gave no revision"))
                });
            match revision.and_then(|r| self.etcdctl(i, &["compaction", &r.to_string()]).map(|_| r)) {
                Ok(r) => return Ok(r),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Whether member `i` is the cluster's leader, by `etcdctl endpoint status`.
    pub(super) fn etcd_is_leader(&self, i: usize) -> bool {
        let Ok(out) = self.etcdctl(i, &["endpoint", "status", "-w", "json"]) else {
            return false;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) else {
            return false;
        };
        let status = &v[0]["Status"];
        let (leader, me) = (&status["leader"], &status["header"]["member_id"]);
        leader.as_u64().is_some_and(|l| Some(l) == me.as_u64())
    }
}
