//! The embedded default database: a private PostgreSQL cluster under
//! `$HPC_LEDGER_HOME` (default `.hpc-ledger/`), made with the machine's
//! PostgreSQL server binaries and started on demand, listening only on a
//! unix socket inside its own directory (no TCP port to collide with).
//!
//! PostgreSQL refuses to run as root. When we are root, `initdb` and the
//! server run as an unprivileged user (`HPC_LEDGER_PG_USER`, default
//! `postgres`) through `runuser` (or `setpriv`). That user must own the data
//! directory and be able to traverse every parent of it; when it cannot
//! (a checkout inside a mode-700 home), the cluster's files are kept under
//! `/var/lib/hpc-ledger/clusters/<hash>` instead and
//! `$HPC_LEDGER_HOME/cluster-location` says where.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write as _;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2::{Digest, Sha256};

/// The database the CLI uses inside the embedded cluster.
pub const DATABASE: &str = "hpc_ledger";
/// The cluster's superuser role.
pub const SUPERUSER: &str = "postgres";
const PORT: u16 = 5432;
/// Unix socket paths are limited to 107 bytes (sun_path).
const MAX_SOCKET_PATH: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found in {searched}.\n\
         Install the PostgreSQL server (Debian/Ubuntu: apt install postgresql; RHEL/Fedora: dnf install postgresql-server), \
         point HPC_LEDGER_PG_BINDIR at its bin directory, or set DATABASE_URL to use an existing server"
    )]
    NoBinaries { searched: String },
    #[error("HPC_LEDGER_PG_BINDIR={0} does not contain initdb, pg_ctl and postgres")]
    BadBindir(PathBuf),
    #[error(
        "running as root, and PostgreSQL refuses to run as root: there is no user {0:?} to run it as. \
         Create one, set HPC_LEDGER_PG_USER to an unprivileged user, or set DATABASE_URL"
    )]
    NoUser(String),
    #[error(
        "neither runuser nor setpriv is available to run PostgreSQL as {0:?}; run hpc-ledger as that user or set DATABASE_URL"
    )]
    NoSwitchUser(String),
    #[error(
        "the PostgreSQL user {user:?} cannot reach {dir} (a parent directory is not traversable, e.g. a mode-700 home), \
         and the fallback {fallback} could not be used: {reason}. Set HPC_LEDGER_HOME to a directory {user:?} can reach"
    )]
    Unreachable {
        user: String,
        dir: PathBuf,
        fallback: PathBuf,
        reason: String,
    },
    #[error("{what} failed: {detail}")]
    Command { what: String, detail: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EmbeddedError {
    let context = context.into();
    move |source| EmbeddedError::Io { context, source }
}

/// The unprivileged account that runs PostgreSQL when we are root.
#[derive(Debug, Clone)]
struct RunAs {
    user: String,
    uid: u32,
    gid: u32,
    /// `runuser` or `setpriv`.
    tool: PathBuf,
}

/// Options for a cluster.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Trade durability for speed (fsync off): for throwaway test clusters.
    pub fast: bool,
}

/// A located (not necessarily running) embedded cluster.
#[derive(Debug, Clone)]
pub struct Embedded {
    home: PathBuf,
    root: PathBuf,
    socket_dir: PathBuf,
    bindir: PathBuf,
    run_as: Option<RunAs>,
    options: Options,
}

/// What `db status` reports.
#[derive(Debug, Clone)]
pub struct Status {
    pub running: bool,
    pub initialized: bool,
    pub data_dir: PathBuf,
    pub socket_dir: PathBuf,
    pub log_file: PathBuf,
    pub bindir: PathBuf,
    pub run_as: Option<String>,
}

impl Embedded {
    /// Find the server binaries and decide where the cluster's files live,
    /// creating the directories it needs.
    pub fn locate(home: &Path, options: Options) -> Result<Embedded, EmbeddedError> {
        fs::create_dir_all(home).map_err(io(format!("creating {}", home.display())))?;
        let home = home
            .canonicalize()
            .map_err(io(format!("resolving {}", home.display())))?;
        let bindir = find_bindir(
            std::env::var_os("HPC_LEDGER_PG_BINDIR").map(PathBuf::from),
            std::env::var_os("PATH"),
            &system_bindirs(),
        )?;
        let run_as = if is_root() { Some(run_as_user()?) } else { None };
        let root = choose_root(&home, run_as.as_ref())?;
        let socket_dir = choose_socket_dir(&root, run_as.as_ref())?;
        Ok(Embedded {
            home,
            root,
            socket_dir,
            bindir,
            run_as,
            options,
        })
    }

    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    pub fn log_file(&self) -> PathBuf {
        self.root.join("postgres.log")
    }

    /// The connection URL of database `db` in this cluster.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgresql://{SUPERUSER}@localhost:{PORT}/{db}?host={}",
            encode_path(&self.socket_dir)
        )
    }

    fn is_initialized(&self) -> bool {
        self.data_dir().join("PG_VERSION").is_file()
    }

    /// A command for a server binary, run as the unprivileged user when root.
    fn pg_command(&self, program: &str) -> Command {
        let exe = self.bindir.join(program);
        match &self.run_as {
            None => Command::new(exe),
            Some(r) => switch_user(r, exe.as_os_str()),
        }
    }

    fn is_running(&self) -> bool {
        self.is_initialized()
            && self
                .pg_command("pg_ctl")
                .arg("status")
                .arg("-D")
                .arg(self.data_dir())
                .output()
                .is_ok_and(|o| o.status.success())
    }

    /// Create the cluster if it does not exist and start it if it is not
    /// running. Safe to call from many processes at once.
    pub fn ensure_running(&self) -> Result<(), EmbeddedError> {
        let lock_path = self.home.join("lock");
        let lock = File::create(&lock_path).map_err(io(format!("creating {}", lock_path.display())))?;
        lock.lock().map_err(io(format!("locking {}", lock_path.display())))?;
        if !self.is_initialized() {
            self.init()?;
            // Never silently: a command run from the wrong directory would
            // otherwise answer from an empty ledger of its own.
            tracing::warn!(
                "created a new, empty embedded database in {} (the ledger home is --home / HPC_LEDGER_HOME; \
                 give DATABASE_URL for a server of your own)",
                self.root.display()
            );
        }
        if !self.is_running() {
            self.start()?;
        }
        Ok(())
    }

    fn init(&self) -> Result<(), EmbeddedError> {
        let data = self.data_dir();
        if data.exists() {
            // A half-made data directory from an interrupted initdb.
            fs::remove_dir_all(&data).map_err(io(format!("removing {}", data.display())))?;
        }
        let mut cmd = self.pg_command("initdb");
        cmd.arg("-D")
            .arg(&data)
            .args(["-U", SUPERUSER, "--auth=trust", "--encoding=UTF8", "--no-locale"]);
        if self.options.fast {
            cmd.arg("--no-sync");
        }
        run(cmd, "initdb")?;
        Ok(())
    }

    fn start(&self) -> Result<(), EmbeddedError> {
        let mut opts = format!(
            "-c listen_addresses='' -c port={PORT} -k {} -c unix_socket_permissions=0700 -c max_connections=200",
            shell_quote(&self.socket_dir.to_string_lossy())
        );
        if self.options.fast {
            opts.push_str(" -c fsync=off -c synchronous_commit=off -c full_page_writes=off");
        }
        let mut cmd = self.pg_command("pg_ctl");
        cmd.arg("start")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_file())
            .args(["-w", "-t", "60", "-o", &opts]);
        run(cmd, "starting PostgreSQL").map_err(|e| match e {
            EmbeddedError::Command { what, detail } => EmbeddedError::Command {
                what,
                detail: format!(
                    "{detail}\n--- last lines of {} ---\n{}",
                    self.log_file().display(),
                    self.log_tail()
                ),
            },
            other => other,
        })?;
        Ok(())
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.log_file()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// A hot standby of this (running) cluster under `home`: a base backup
    /// taken over the primary's socket with `pg_basebackup -R` (which writes
    /// the standby's connection to the primary), started. Made once; later
    /// calls start it if it is stopped. What it serves is read-only and as
    /// recent as its last replayed change (docs/scaling.md).
    pub fn standby(&self, home: &Path) -> Result<Embedded, EmbeddedError> {
        let standby = Embedded::locate(home, self.options.clone())?;
        if standby.root == self.root {
            return Err(EmbeddedError::Command {
                what: "making a standby".into(),
                detail: format!("{} is the primary's own home", home.display()),
            });
        }
        let lock_path = standby.home.join("lock");
        let lock = File::create(&lock_path).map_err(io(format!("creating {}", lock_path.display())))?;
        lock.lock().map_err(io(format!("locking {}", lock_path.display())))?;
        if !standby.is_initialized() {
            let data = standby.data_dir();
            if data.exists() {
                // A half-made copy from an interrupted base backup.
                fs::remove_dir_all(&data).map_err(io(format!("removing {}", data.display())))?;
            }
            let mut cmd = standby.pg_command("pg_basebackup");
            cmd.arg("-D")
                .arg(&data)
                .arg("-h")
                .arg(&self.socket_dir)
                .args(["-p", &PORT.to_string(), "-U", SUPERUSER])
                .args(["--write-recovery-conf", "--wal-method=stream", "--checkpoint=fast"]);
            if self.options.fast {
                cmd.arg("--no-sync");
            }
            run(cmd, "pg_basebackup")?;
        }
        if !standby.is_running() {
            standby.start()?;
        }
        Ok(standby)
    }

    /// Stop the server if it runs. Returns whether it was running.
    pub fn stop(&self) -> Result<bool, EmbeddedError> {
        if !self.is_running() {
            return Ok(false);
        }
        let mut cmd = self.pg_command("pg_ctl");
        cmd.arg("stop")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "fast", "-w"]);
        run(cmd, "stopping PostgreSQL")?;
        Ok(true)
    }

    pub fn status(&self) -> Status {
        Status {
            running: self.is_running(),
            initialized: self.is_initialized(),
            data_dir: self.data_dir(),
            socket_dir: self.socket_dir.clone(),
            log_file: self.log_file(),
            bindir: self.bindir.clone(),
            run_as: self.run_as.as_ref().map(|r| r.user.clone()),
        }
    }
}

fn run(mut cmd: Command, what: &str) -> Result<Output, EmbeddedError> {
    let out = cmd.output().map_err(io(format!("running {what}")))?;
    if !out.status.success() {
        let detail = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
        return Err(EmbeddedError::Command {
            what: what.to_owned(),
            detail,
        });
    }
    Ok(out)
}

fn switch_user(r: &RunAs, program: &OsStr) -> Command {
    let mut cmd = Command::new(&r.tool);
    if r.tool.ends_with("runuser") {
        cmd.arg("-u").arg(&r.user).arg("--");
    } else {
        cmd.arg(format!("--reuid={}", r.uid))
            .arg(format!("--regid={}", r.gid))
            .arg("--init-groups")
            .arg("--");
    }
    cmd.arg(program);
    cmd
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn id_of(user: &str, flag: &str) -> Option<u32> {
    let out = Command::new("id").arg(flag).arg(user).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn run_as_user() -> Result<RunAs, EmbeddedError> {
    let user = std::env::var("HPC_LEDGER_PG_USER").unwrap_or_else(|_| "postgres".into());
    let (Some(uid), Some(gid)) = (id_of(&user, "-u"), id_of(&user, "-g")) else {
        return Err(EmbeddedError::NoUser(user));
    };
    if uid == 0 {
        return Err(EmbeddedError::NoUser(user));
    }
    let tool = [
        "/usr/sbin/runuser",
        "/sbin/runuser",
        "/usr/bin/runuser",
        "/usr/bin/setpriv",
        "/bin/setpriv",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .ok_or_else(|| EmbeddedError::NoSwitchUser(user.clone()))?;
    Ok(RunAs { user, uid, gid, tool })
}

fn has_server_binaries(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"].iter().all(|b| dir.join(b).is_file())
}

/// Standard places of PostgreSQL server binaries, newest version first.
fn system_bindirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        dirs.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    for parent in ["/usr/lib/postgresql", "/usr/local/pgsql", "/opt/postgresql"] {
        let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(parent)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let v = e.file_name().to_string_lossy().split('.').next()?.parse().ok()?;
                Some((v, e.path().join("bin")))
            })
            .collect();
        versions.sort_by_key(|v| std::cmp::Reverse(v.0));
        dirs.extend(versions.into_iter().map(|(_, p)| p));
    }
    for pgsql in fs::read_dir("/usr").into_iter().flatten().flatten() {
        if pgsql.file_name().to_string_lossy().starts_with("pgsql-") {
            dirs.push(pgsql.path().join("bin"));
        }
    }
    dirs
}

/// A PostgreSQL client program (`psql`, …): on `PATH`, else next to the
/// server binaries.
pub fn client_binary(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    on_path.or_else(|| {
        find_bindir(
            std::env::var_os("HPC_LEDGER_PG_BINDIR").map(PathBuf::from),
            None,
            &system_bindirs(),
        )
        .ok()
        .map(|dir| dir.join(name))
        .filter(|p| p.is_file())
    })
}

/// Where the server binaries are: an explicit directory, then `PATH`, then
/// the standard places. Directories on `PATH` are resolved through symlinks
/// so `pg_ctl` finds its own `postgres`.
pub fn find_bindir(
    explicit: Option<PathBuf>,
    path_var: Option<std::ffi::OsString>,
    standard: &[PathBuf],
) -> Result<PathBuf, EmbeddedError> {
    if let Some(dir) = explicit {
        return if has_server_binaries(&dir) {
            Ok(dir)
        } else {
            Err(EmbeddedError::BadBindir(dir))
        };
    }
    let from_path = path_var
        .iter()
        .flat_map(std::env::split_paths)
        .filter_map(|dir| dir.join("initdb").canonicalize().ok())
        .filter_map(|initdb| initdb.parent().map(Path::to_path_buf));
    if let Some(dir) = from_path
        .chain(standard.iter().cloned())
        .find(|d| has_server_binaries(d))
    {
        return Ok(dir);
    }
    let mut searched = vec!["PATH".to_owned()];
    searched.extend(standard.iter().map(|p| p.display().to_string()));
    if standard.is_empty() {
        searched.push("/usr/lib/postgresql/*/bin".to_owned());
    }
    Err(EmbeddedError::NoBinaries {
        searched: searched.join(", "),
    })
}

fn make_private_dir(dir: &Path, run_as: Option<&RunAs>) -> Result<(), EmbeddedError> {
    fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    if let Some(r) = run_as {
        chown(dir, Some(r.uid), Some(r.gid)).map_err(io(format!("giving {} to {}", dir.display(), r.user)))?;
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(io(format!("setting permissions of {}", dir.display())))
}

/// Whether the PostgreSQL user can write into `dir` (and so traverse its parents).
fn reachable(dir: &Path, r: &RunAs) -> bool {
    let mut cmd = switch_user(r, OsStr::new("test"));
    cmd.arg("-w").arg(dir).arg("-a").arg("-x").arg(dir);
    cmd.output().is_ok_and(|o| o.status.success())
}

fn short_hash(p: &Path) -> String {
    let digest = Sha256::digest(p.as_os_str().as_encoded_bytes());
    hex::encode(&digest[..6])
}

/// `home/pg`, or a fallback the PostgreSQL user can reach.
fn choose_root(home: &Path, run_as: Option<&RunAs>) -> Result<PathBuf, EmbeddedError> {
    let preferred = home.join("pg");
    let Some(r) = run_as else {
        make_private_dir(&preferred, None)?;
        return Ok(preferred);
    };
    make_private_dir(&preferred, Some(r))?;
    if reachable(&preferred, r) {
        return Ok(preferred);
    }
    let fallback = PathBuf::from("/var/lib/hpc-ledger/clusters").join(short_hash(home));
    let note = home.join("cluster-location");
    let first_time = !note.exists();
    let attempt = (|| {
        fs::create_dir_all(fallback.parent().expect("has a parent")).map_err(|e| e.to_string())?;
        make_private_dir(&fallback, Some(r)).map_err(|e| e.to_string())?;
        if !reachable(&fallback, r) {
            return Err(format!("{} cannot reach it either", r.user));
        }
        let mut f = File::create(&note).map_err(|e| e.to_string())?;
        writeln!(
            f,
            "The PostgreSQL user {:?} cannot reach {}, so this cluster's files are in:\n{}",
            r.user,
            preferred.display(),
            fallback.display()
        )
        .map_err(|e| e.to_string())?;
        Ok(())
    })();
    match attempt {
        Ok(()) => {
            if first_time {
                tracing::info!(
                    "PostgreSQL user {} cannot reach {}; keeping the embedded cluster in {}",
                    r.user,
                    preferred.display(),
                    fallback.display()
                );
            }
            Ok(fallback)
        }
        Err(reason) => Err(EmbeddedError::Unreachable {
            user: r.user.clone(),
            dir: preferred,
            fallback,
            reason,
        }),
    }
}

/// `root/run`, or a short directory under /tmp when that path is too long
/// for a unix socket.
fn choose_socket_dir(root: &Path, run_as: Option<&RunAs>) -> Result<PathBuf, EmbeddedError> {
    let preferred = root.join("run");
    let dir = if preferred.join(format!(".s.PGSQL.{PORT}")).as_os_str().len() <= MAX_SOCKET_PATH {
        preferred
    } else {
        std::env::temp_dir().join(format!("hpc-ledger-{}", short_hash(root)))
    };
    if dir.is_symlink() {
        return Err(EmbeddedError::Io {
            context: format!("socket directory {} is a symlink; refusing to use it", dir.display()),
            source: std::io::Error::other("symlink"),
        });
    }
    make_private_dir(&dir, run_as)?;
    Ok(dir)
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Percent-encode a path for a URL query value (keeping `/`).
fn encode_path(p: &Path) -> String {
    let mut out = String::new();
    for b in p.as_os_str().as_encoded_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => out.push(*b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_binaries_is_a_clear_error() {
        let empty = std::env::temp_dir();
        let err = find_bindir(None, Some(empty.clone().into_os_string()), &[empty]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found in PATH"),
            "{msg}"
        );
        assert!(
            msg.contains("apt install postgresql") && msg.contains("DATABASE_URL"),
            "{msg}"
        );
        let err = find_bindir(Some(PathBuf::from("/nonexistent")), None, &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "HPC_LEDGER_PG_BINDIR=/nonexistent does not contain initdb, pg_ctl and postgres"
        );
    }

    #[test]
    fn urls_carry_the_socket_directory() {
        assert_eq!(encode_path(Path::new("/a b/.hpc-ledger/run")), "/a%20b/.hpc-ledger/run");
        assert_eq!(shell_quote("/it's"), r"'/it'\''s'");
    }
}
