//! PostgreSQL servers for the fencing gates' cases: the command line, the binaries of
//! Debian's package, and the user that owns the data directory.

use super::*;

/// The PostgreSQL role the test server is made with (no password: trust on loopback).
pub(super) const POSTGRES_USER: &str = "coord";

/// The path of PostgreSQL's `binary` (`postgres`, `initdb`, `pg_isready`) from the
/// newest version Debian installed under `/usr/lib/postgresql/VERSION/bin`.
pub(super) fn pg_bin(binary: &str) -> Result<String> {
    let versions = std::fs::read_dir("/usr/lib/postgresql").map_err(|_| {
        err("PostgreSQL is not installed: install the Debian package postgresql (apt-get install postgresql)")
    })?;
    let newest = versions
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .ok_or_else(|| err("no PostgreSQL version under /usr/lib/postgresql: apt-get install postgresql"))?;
    Ok(format!("/usr/lib/postgresql/{newest}/bin/{binary}"))
}

/// As root, the `postgres` account's uid and gid (PostgreSQL refuses to run as root);
/// `None` for any other user, who runs it as themselves.
pub(super) fn postgres_owner() -> Result<Option<(u32, u32)>> {
    let me = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| err(format!("cannot run id: {e}")))?;
    if String::from_utf8_lossy(&me.stdout).trim() != "0" {
        return Ok(None);
    }
    let passwd =
        std::fs::read_to_string("/etc/passwd").map_err(|e| err(format!("cannot read /etc/passwd: {e}")))?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postgres") && f.len() > 3)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
        })
        .flatten()
        .map(Some)
        .ok_or_else(|| {
            err("running as root needs the postgres account, which the Debian package postgresql makes")
        })
}

/// Makes member `dir`'s database (`initdb`, owned by the account that will run it) and
/// returns the server's command line: loopback only, its socket in `dir`, no fsync.
pub(super) fn postgres_argv(dir: &Path, me: &MemberSpec, options: &ClusterOptions) -> Result<Vec<String>> {
    use std::os::unix::process::CommandExt as _;
    let data = dir.join("data");
    // initdb wants an empty or missing directory.
    let _ = std::fs::remove_dir_all(&data);
    let owner = postgres_owner()?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .map_err(|e| err(format!("cannot give {} to postgres: {e}", dir.display())))?;
    }
    let mut initdb = Command::new(pg_bin("initdb")?);
    initdb
        .args([
            "-A",
            "trust",
            "-U",
            POSTGRES_USER,
            "-E",
            "UTF8",
            "--no-sync",
            "-D",
        ])
        .arg(&data)
        .stdin(Stdio::null());
    if let Some((uid, gid)) = owner {
        initdb.uid(uid).gid(gid);
    }
    let out = initdb
        .output()
        .map_err(|e| err(format!("cannot run initdb: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "initdb failed in {}: {}",
            data.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let mut argv = vec![
        pg_bin("postgres")?,
        "-D".to_owned(),
        data.display().to_string(),
        "-k".to_owned(),
        dir.display().to_string(),
        "-h".to_owned(),
        "127.0.0.1".to_owned(),
        "-p".to_owned(),
        me.client_port.to_string(),
    ];
    for setting in [
        "fsync=off",
        "full_page_writes=off",
        "synchronous_commit=off",
        "max_connections=200",
    ] {
        argv.push("-c".to_owned());
        argv.push(setting.to_owned());
    }
    for extra in &options.extra {
        argv.push("-c".to_owned());
        argv.push(extra.clone());
    }
    Ok(argv)
}
