//! ZooKeeper ensembles: each member's command line and `zoo.cfg`, its mode, and the
//! quorum routes the partition faults rewrite.

use super::*;

pub(super) const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";

/// ZooKeeper's `srvr` answer's mode (`leader`, `follower`, `standalone`), if it answers.
pub(super) fn zk_mode(port: u16) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"srvr").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_owned())
}

pub(super) fn zk_argv(
    dir: &Path,
    i: usize,
    members: &[MemberSpec],
    options: &ClusterOptions,
) -> Result<Vec<String>> {
    let me = &members[i];
    let data = dir.join("data");
    let mut cfg = vec![
        // 100 ms ticks: session timeouts of 200 ms .. 2 s are allowed; ZooKeeper's own
        // (Debian's, Docker's) 2 s ticks allow 4 s .. 40 s.
        if options.server_defaults {
            "tickTime=2000"
        } else {
            "tickTime=100"
        }
        .to_owned(),
        if options.server_defaults {
            "initLimit=10"
        } else {
            "initLimit=20"
        }
        .to_owned(),
        if options.server_defaults {
            "syncLimit=5"
        } else {
            "syncLimit=10"
        }
        .to_owned(),
        format!("dataDir={}", data.display()),
        "clientPortAddress=127.0.0.1".to_owned(),
        "maxClientCnxns=0".to_owned(),
        "admin.enableServer=false".to_owned(),
        "4lw.commands.whitelist=ruok,srvr,stat,cons,wchs".to_owned(),
        "forceSync=no".to_owned(),
    ];
    match &options.tls {
        None => {
            cfg.push(format!("clientPort={}", me.client_port));
        }
        Some(certs) => {
            cfg.push(format!("clientPort={}", me.probe_port));
            cfg.push(format!("secureClientPort={}", me.client_port));
            cfg.push("serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory".to_owned());
            cfg.push(format!(
                "ssl.keyStore.location={}",
                certs.join("server-keystore.pem").display()
            ));
            cfg.push("ssl.keyStore.type=PEM".to_owned());
            cfg.push(format!(
                "ssl.trustStore.location={}",
                certs.join("ca.pem").display()
            ));
            cfg.push("ssl.trustStore.type=PEM".to_owned());
            cfg.push("ssl.clientAuth=need".to_owned());
        }
    }
    if members.len() > 1 {
        for (n, m) in members.iter().enumerate() {
            cfg.push(format!(
                "server.{}=127.0.0.1:{}:{}",
                n + 1,
                m.peer_port,
                m.election_port
            ));
        }
        std::fs::write(data.join("myid"), format!("{}\n", i + 1))
            .map_err(|e| err(format!("cannot write myid: {e}")))?;
    }
    cfg.extend(options.extra.iter().cloned());
    let cfg_path = dir.join("zoo.cfg");
    std::fs::write(&cfg_path, cfg.join("\n") + "\n")
        .map_err(|e| err(format!("cannot write {}: {e}", cfg_path.display())))?;
    Ok(zk_command(
        &cfg_path,
        (!options.server_defaults).then_some(options.container_sweep),
    ))
}

/// The server's command line; `container_sweep` `None` keeps ZooKeeper's own (a minute).
pub(super) fn zk_command(cfg: &Path, container_sweep: Option<Duration>) -> Vec<String> {
    // netty-codec is not on zookeeper.jar's manifest class path, but its Netty connection
    // factory (the TLS port) needs it.
    let cp = format!("{ZK_JAR}:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-codec.jar");
    let mut argv = vec![
        "java".to_owned(),
        "-Xmx256m".to_owned(),
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn".to_owned(),
    ];
    if let Some(sweep) = container_sweep {
        argv.push(format!("-Dznode.container.checkIntervalMs={}", sweep.as_millis()));
        argv.push("-Dznode.container.maxPerMinute=1000000".to_owned());
    }
    argv.extend([
        "-cp".to_owned(),
        cp,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain".to_owned(),
        cfg.display().to_string(),
    ]);
    argv
}

impl Cluster {
    /// ZooKeeper: member `i`'s quorum (peer) and leader-election addresses, which the
    /// other members connect to.
    ///
    /// # Errors
    ///
    /// No such member.
    pub fn quorum_addrs(&self, i: usize) -> Result<(SocketAddr, SocketAddr)> {
        self.check(i)?;
        let m = &self.state.members[i];
        Ok((
            SocketAddr::from(([127, 0, 0, 1], m.peer_port)),
            SocketAddr::from(([127, 0, 0, 1], m.election_port)),
        ))
    }

    /// ZooKeeper: rewrites member `i`'s `zoo.cfg` so that it reaches each listed member
    /// `j` at the given (peer, election) addresses — fault proxies, say, to cut member
    /// `i` off from the rest while its clients still reach it — and sets the `key=value`
    /// lines in `settings` (replacing the same keys). Takes effect when the member
    /// starts again ([`Cluster::restart`]); [`Cluster::restore_config`] undoes it.
    ///
    /// A member reaches another through its own configuration when it connects: as a
    /// follower to the leader's peer port, and in elections to every member with a
    /// lower id (ZooKeeper keeps one connection per pair, the one from the higher id).
    ///
    /// # Errors
    ///
    /// Not ZooKeeper, no such member, or the file cannot be read or written.
    pub fn route_quorum(
        &self,
        i: usize,
        routes: &[(usize, SocketAddr, SocketAddr)],
        settings: &[String],
    ) -> Result<()> {
        self.check(i)?;
        if self.kind() != Kind::Zk {
            return Err(err("route_quorum is for ZooKeeper ensembles"));
        }
        let cfg = self.dir.join(format!("m{i}")).join("zoo.cfg");
        let original = cfg.with_extension("cfg.orig");
        if !original.exists() {
            std::fs::copy(&cfg, &original).map_err(|e| err(format!("cannot keep {}: {e}", cfg.display())))?;
        }
        let text = std::fs::read_to_string(&original)
            .map_err(|e| err(format!("cannot read {}: {e}", original.display())))?;
        let key = |line: &str| line.split_once('=').map(|(k, _)| k.trim().to_owned());
        let replaced: Vec<Option<String>> = settings.iter().map(|s| key(s)).collect();
        let mut lines: Vec<String> = Vec::new();
        for line in text.lines() {
            let k = key(line);
            if k.is_some() && replaced.contains(&k) {
                continue;
            }
            let routed = routes
                .iter()
                .find(|(j, _, _)| k.as_deref() == Some(&format!("server.{}", j + 1)));
            match routed {
                Some((j, peer, election)) => lines.push(format!(
                    "server.{}={}:{}:{}",
                    j + 1,
                    peer.ip(),
                    peer.port(),
                    election.port()
                )),
                None => lines.push(line.to_owned()),
            }
        }
        // ZooKeeper takes one host for both ports of a member.
        if let Some((_, peer, election)) = routes.iter().find(|(_, p, e)| p.ip() != e.ip()) {
            return Err(err(format!(
                "the peer ({peer}) and election ({election}) addresses of a member must share a host"
            )));
        }
        lines.extend(settings.iter().cloned());
        std::fs::write(&cfg, lines.join("\n") + "\n")
            .map_err(|e| err(format!("cannot write {}: {e}", cfg.display())))
    }

    /// ZooKeeper: the value of `key` in member `i`'s `zoo.cfg` (`tickTime`, say), if set.
    pub fn zk_setting(&self, i: usize, key: &str) -> Option<String> {
        self.check(i).ok()?;
        let cfg = self.dir.join(format!("m{i}")).join("zoo.cfg");
        let text = std::fs::read_to_string(cfg).ok()?;
        text.lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim().to_owned())
    }

    /// ZooKeeper: puts back the `zoo.cfg` [`Cluster::route_quorum`] rewrote (nothing if
    /// it did not); takes effect when the member starts again.
    ///
    /// # Errors
    ///
    /// No such member, or the file cannot be written.
    pub fn restore_config(&self, i: usize) -> Result<()> {
        self.check(i)?;
        let cfg = self.dir.join(format!("m{i}")).join("zoo.cfg");
        let original = cfg.with_extension("cfg.orig");
        if original.exists() {
            std::fs::rename(&original, &cfg)
                .map_err(|e| err(format!("cannot put back {}: {e}", cfg.display())))?;
        }
        Ok(())
    }

    /// Whether member `i` leads the ensemble (or is a standalone server), by its
    /// four-letter `srvr` answer.
    pub(super) fn zk_is_leader(&self, i: usize) -> bool {
        matches!(
            zk_mode(self.state.members[i].probe_port).as_deref(),
            Some("leader" | "standalone")
        )
    }
}
