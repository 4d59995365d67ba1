//! The dashboard in a real browser: `tests/browser.py` drives headless Debian Chromium
//! through Selenium against a gateway with the dashboard mounted, and leaves a
//! screenshot of every navigation page at 1280 and 390 px in
//! `target/dashboard-screenshots/`.
//!
//! The interpreter comes from `SWITCHYARD_TEST_PYTHON`, or `.venv/bin/python` at the
//! repository root (both set up by `scripts/test.sh`, which installs `selenium`).
//! Chromium and its driver come from Debian (`.ci/run` installs them); without
//! `/usr/bin/chromedriver` the test fails and says how to install them.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;
use switchyard_test_support::{Harness, ADMIN, CRED_ALPHA, CRED_BETA, KEY, OPS_KEY};

/// Where the script finds the driver (it also uses `/usr/bin/chromium`).
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The longest the script may take.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap_or(Path::new("."))
}

fn python() -> PathBuf {
    if let Ok(p) = std::env::var("SWITCHYARD_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = root().join(".venv/bin/python");
    assert!(
        venv.exists(),
        "the selenium Python package is needed: run scripts/test.sh (it creates .venv), or set SWITCHYARD_TEST_PYTHON"
    );
    venv
}

#[tokio::test]
async fn the_dashboard_works_in_headless_chromium() {
    assert!(
        Path::new(CHROMEDRIVER).exists(),
        "{CHROMEDRIVER} is missing: install Chromium and its driver with `apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver` (.ci/run does this)"
    );
    let h = Harness::start_mounted(switchyard_dashboard::routes).await;
    // An exclusive lease on beta-1 (the flows use alpha), for the sessions page.
    common::leased(&h, "beta-1").await;
    let out = root().join("target/dashboard-screenshots");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/browser.py");
    let run = tokio::process::Command::new(python())
        .arg(script)
        .arg(&h.base)
        .arg(ADMIN)
        .arg(&out)
        .arg(h.mock.base_url())
        .arg(KEY)
        .arg(CRED_ALPHA)
        .kill_on_drop(true)
        .output();
    let done = tokio::time::timeout(SCRIPT_TIMEOUT, run)
        .await
        .expect("the browser script did not finish within five minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(done.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    // The script reads the pages from the navigation: as many as it links to.
    let links: usize = stdout
        .strip_prefix("signed in: ")
        .and_then(|rest| rest.split_once(" navigation links\n"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no navigation count: {stdout}"));
    assert!(links >= 9, "{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("page ")).count(),
        2 * links,
        "{stdout}"
    );
    // Each navigation page is what its link says: it marks that link current, its h1
    // starts with the link's label, it has one main landmark and no error banner.
    let pages = [
        ("overview", "Overview", "Overview"),
        ("costs-quota-share", "Quota share", "Quota share"),
        ("costs-quota-share-plans", "Plans", "Plans"),
        ("resilience", "Resilience", "Resilience"),
        ("keys", "Keys", "Keys"),
        ("providers", "Providers and connections", "Providers"),
        ("combos", "Combos", "Combos"),
        ("sessions", "Sessions", "Sessions"),
        ("settings", "Settings", "Settings"),
        ("requests", "Requests", "Requests"),
    ];
    for width in [1280, 390] {
        for (name, h1, label) in pages {
            let png = out.join(format!("{name}-{width}.png"));
            let line = format!(
                "page {name} at {width} px: fits, h1 \"{h1}\", current nav \"{label}\", 1 main, 0 alerts, {}\n",
                png.display()
            );
            assert!(stdout.contains(&line), "{line} missing: {stdout}");
            let png = std::fs::read(png).unwrap();
            assert_eq!(png[..8], *b"\x89PNG\r\n\x1a\n");
        }
    }
    assert!(
        stdout.ends_with(&format!(
            "keyboard: Tab reaches the skip link, then {links} navigation links in order\n\
             pool: created through the form's rows, one added in the browser; three requests moved the bar and the table to k1: 3 of a fair share of 5\n\
             cooldown: alpha-1 cooled by a 429, cleared by selection, and serving again\n\
             key: the secret was shown once, works, and is on none of the {links} pages afterwards\n\
             route: the fast request's route opens on alpha/mock-small @ alpha-1 with its penalty 1.0\n\
             sign out: /dashboard then lands on the sign-in page\n\
             old session: its form to /dashboard/keys answers \"Forbidden\"\n\
             sign in again: a wrong token says \"Error: That is neither the admin token nor an admin-scoped key.\", then the admin token opens the overview; no stale form key\n\
             all flows passed\n"
        )),
        "{stdout}"
    );
    for secret in [CRED_ALPHA, CRED_BETA, ADMIN, KEY, OPS_KEY] {
        assert!(!stdout.contains(secret));
    }
}
