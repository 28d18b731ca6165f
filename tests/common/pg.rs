//! PostgreSQL for tests: the server at `LOOPGUARD_TEST_DATABASE_URL` when it is set, otherwise a
//! temporary cluster started here from the installed binaries (`/usr/lib/postgresql/*/bin`, or
//! `LOOPGUARD_TEST_PG_BIN`), run as the `postgres` user when the tests run as root (PostgreSQL
//! refuses root). Every test gets a database of its own.
//!
//! Without either, the PostgreSQL tests print one line saying how to run them and return; with
//! `LOOPGUARD_REQUIRE_POSTGRES=1` (CI sets it) they fail instead, so they cannot pass by being
//! skipped there.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A PostgreSQL server tests can create databases on.
pub struct Postgres {
    /// `postgres://user[:password]@host:port`, no database.
    base: String,
    /// Query parameters of the given URL, kept on every database's URL.
    params: String,
    cluster: Option<Cluster>,
}

/// A cluster this process started, stopped when dropped (or at exit, for the shared one).
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    child: Mutex<Option<Child>>,
}

const REQUIRE: &str = "LOOPGUARD_REQUIRE_POSTGRES";
const URL: &str = "LOOPGUARD_TEST_DATABASE_URL";

fn required() -> bool {
    std::env::var_os(REQUIRE).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Say once per test binary why the PostgreSQL tests did not run (or fail, where they must run).
fn unavailable(why: &str) {
    if required() {
        panic!("{REQUIRE} is set but PostgreSQL is not usable: {why}");
    }
    static SAID: OnceLock<()> = OnceLock::new();
    SAID.get_or_init(|| {
        eprintln!(
            "SKIPPED: the PostgreSQL tests ({why}); install PostgreSQL (apt-get install postgresql) \
             or set {URL}=postgres://USER:PASSWORD@HOST:PORT to run them"
        );
    });
}

/// The installed server binaries: `LOOPGUARD_TEST_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin`.
pub fn binaries() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("LOOPGUARD_TEST_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// The uid and gid of the `postgres` user.
fn postgres_user() -> Option<(u32, u32)> {
    let name = std::ffi::CString::new("postgres").unwrap();
    // SAFETY: getpwnam returns a pointer to static storage or null; read at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: non-null, as checked.
    unsafe { Some(((*pw).pw_uid, (*pw).pw_gid)) }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A command for a PostgreSQL binary, as the `postgres` user when we are root, that dies with
/// this process (an immediate shutdown) rather than outliving a killed test.
fn pg_command(bin: &Path, program: &str) -> Command {
    let mut cmd = Command::new(bin.join(program));
    let user = if is_root() { postgres_user() } else { None };
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if let Some((uid, gid)) = user {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // After setuid: a change of credentials clears it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT);
            Ok(())
        });
    }
    cmd
}

/// Spawn `cmd` from a thread that lives as long as the test binary. The parent-death signal
/// of [`pg_command`] fires when the *thread* that spawned the child exits, and every test runs
/// on a thread of its own: a cluster shared by the tests would die with the first test.
fn spawn_from_keeper(mut cmd: Command) -> std::io::Result<Child> {
    type Job = Box<dyn FnOnce() + Send>;
    static KEEPER: OnceLock<Mutex<std::sync::mpsc::Sender<Job>>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for job in rx {
                job();
            }
        });
        Mutex::new(tx)
    });
    let (tx, rx) = std::sync::mpsc::channel();
    keeper
        .lock()
        .unwrap()
        .send(Box::new(move || {
            let _ = tx.send(cmd.spawn());
        }))
        .expect("the keeper thread runs");
    rx.recv().expect("the keeper thread answers")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    /// initdb into a temporary directory and start the server. `None` when the binaries or
    /// the `postgres` user (as root) are missing.
    pub fn start() -> Result<Cluster, String> {
        let bin = binaries().ok_or("no PostgreSQL server binaries under /usr/lib/postgresql")?;
        if is_root() && postgres_user().is_none() {
            return Err("running as root and there is no `postgres` user to run it as".into());
        }
        let dir = tempfile::Builder::new()
            .prefix("loopguard-pg-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        if let (true, Some((uid, gid))) = (is_root(), postgres_user()) {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| e.to_string())?;
        }
        let out = pg_command(&bin, "initdb")
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(dir.path().join("data"))
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let cluster = Cluster {
            dir,
            bin,
            port: free_port(),
            child: Mutex::new(None),
        };
        cluster.resume();
        Ok(cluster)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Start the server (again, after [`Cluster::stop`]) and wait until it accepts queries.
    pub fn resume(&self) {
        let mut child = self.child.lock().unwrap();
        assert!(child.is_none(), "the server is already running");
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        let mut cmd = pg_command(&self.bin, "postgres");
        cmd.arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=300",
                // Durable commits, as in production: fsync stays on.
                "-c",
                "fsync=on",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let spawned = spawn_from_keeper(cmd).expect("start postgres");
        *child = Some(spawned);
        drop(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not start: {}",
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the server: a fast shutdown (clients disconnected, in-flight transactions rolled
    /// back), as an operator restarting it would.
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let _ = child.wait();
        }
    }

    fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            // SAFETY: signalling our own child: immediate shutdown.
            unsafe { libc::kill(child.id() as i32, libc::SIGQUIT) };
            let _ = child.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill();
    }
}

static SHARED: OnceLock<Option<Postgres>> = OnceLock::new();

extern "C" fn stop_shared() {
    if let Some(Some(pg)) = SHARED.get() {
        if let Some(c) = &pg.cluster {
            c.kill();
        }
    }
}

/// Run `f` on a runtime of its own, on another thread: databases are created from sync code
/// that may itself be inside a runtime.
fn block_on<T: Send + 'static>(f: impl std::future::Future<Output = T> + Send + 'static) -> T {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    })
    .join()
    .unwrap()
}

impl Postgres {
    /// The server every test of this binary shares; `None` (said once) when there is none.
    pub fn shared() -> Option<&'static Postgres> {
        let pg = SHARED.get_or_init(|| {
            if let Ok(url) = std::env::var(URL) {
                if !url.is_empty() {
                    return Some(Postgres::at(&url));
                }
            }
            match Cluster::start() {
                Ok(c) => {
                    // SAFETY: registering a plain extern "C" function.
                    unsafe { libc::atexit(stop_shared) };
                    Some(Postgres::of(c))
                }
                Err(why) => {
                    unavailable(&why);
                    None
                }
            }
        });
        if pg.is_none() {
            unavailable("no PostgreSQL server");
        }
        pg.as_ref()
    }

    /// A server of its own, which the test may stop and start (`None`, said once, without the
    /// binaries).
    pub fn own() -> Option<Postgres> {
        match Cluster::start() {
            Ok(c) => Some(Postgres::of(c)),
            Err(why) => {
                unavailable(&format!("a test needing its own server: {why}"));
                None
            }
        }
    }

    fn of(c: Cluster) -> Postgres {
        Postgres {
            base: format!("postgres://postgres@127.0.0.1:{}", c.port),
            params: String::new(),
            cluster: Some(c),
        }
    }

    /// The server of a URL (its database part is replaced per test).
    fn at(url: &str) -> Postgres {
        let (rest, params) = url.split_once('?').unwrap_or((url, ""));
        let (scheme, after) = rest.split_once("://").expect("a postgres:// URL");
        let authority = after.split('/').next().unwrap_or(after);
        Postgres {
            base: format!("{scheme}://{authority}"),
            params: params.to_string(),
            cluster: None,
        }
    }

    pub fn cluster(&self) -> Option<&Cluster> {
        self.cluster.as_ref()
    }

    fn url_of(&self, db: &str) -> String {
        if self.params.is_empty() {
            format!("{}/{db}", self.base)
        } else {
            format!("{}/{db}?{}", self.base, self.params)
        }
    }

    /// A new, empty database; its URL.
    pub fn database(&self) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "loopguard_test_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let admin = self.url_of("postgres");
        // template0: CREATE DATABASE copies its template and refuses while another session is
        // connected to it, which concurrent tests on template1 would be.
        let create = format!("CREATE DATABASE {name} TEMPLATE template0");
        block_on(async move {
            use sqlx::{Connection, Executor};
            let mut c = sqlx::PgConnection::connect(&admin)
                .await
                .unwrap_or_else(|e| panic!("connecting to {admin}: {e}"));
            c.execute(create.as_str()).await.unwrap();
        });
        self.url_of(&name)
    }
}

/// A database for one test on the shared server, or `None` (the tests then return).
pub fn database() -> Option<String> {
    Postgres::shared().map(Postgres::database)
}
