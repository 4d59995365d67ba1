"""Drives the dashboard in headless Chromium (Debian's `chromium` and
`/usr/bin/chromedriver`) through Selenium.

Usage: browser.py BASE_URL ADMIN_TOKEN SCREENSHOT_DIR MOCK_URL CLIENT_KEY ALPHA_CREDENTIAL

The gateway at BASE_URL serves the test harness's standard configuration (providers
`alpha` and `beta`, connections `alpha-1` and `beta-1`, keys `k1` (CLIENT_KEY) and
`ops`); MOCK_URL is its mock upstream, whose rules the flows set to make `alpha` fail
(matching ALPHA_CREDENTIAL, the credential alpha's requests carry).

Each flow is a function taking the `Run` (driver, base URL, token, output folder); `FLOWS`
lists them in the order they run. A flow raises `AssertionError` on a failure; the
script prints one line per check and exits 1 after the first failing flow.

Pages come from the `<nav>` links of the signed-in overview, so a page added to the
navigation is screenshotted and checked without touching this script.
"""

import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# The widths every page is checked at: a laptop and a phone.
WIDTHS = (1280, 390)
HEIGHT = 900


class Run:
    """What every flow works with."""

    def __init__(self, driver, base, token, out, mock="", key="", alpha=""):
        self.driver = driver
        self.base = base.rstrip("/")
        self.token = token
        self.out = out
        self.mock = mock.rstrip("/")
        self.key = key
        self.alpha = alpha
        # (name, path, label) of the navigation's pages, filled by `sign_in`.
        self.pages = []

    def open(self, path):
        self.driver.get(self.base + path)

    def path(self):
        url = self.driver.current_url
        assert url.startswith(self.base), url
        return url[len(self.base):]

    def click_and_wait(self, element, path):
        """Clicks `element` (a link or a submit button) and waits until the browser has
        left the current page for `path` (with any query): a click only starts the
        navigation."""
        before = self.driver.find_element(By.TAG_NAME, "html")
        element.click()
        WebDriverWait(self.driver, 10).until(lambda d: not is_attached(before))
        WebDriverWait(self.driver, 10).until(lambda d: self.path().split("?")[0] == path)

    def viewport(self, width):
        """Sets the layout viewport to `width` CSS pixels exactly."""
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )

    def screenshot(self, file):
        """A PNG of the whole page (not only the viewport)."""
        metrics = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
        size = metrics["cssContentSize"]
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
            },
        )
        with open(file, "wb") as f:
            f.write(base64.b64decode(shot["data"]))

    def wait_for(self, text, seconds=15):
        """Waits until the page shows `text` in its source, without reloading it (what
        htmx's refresh of a live region brings in counts)."""
        WebDriverWait(self.driver, seconds).until(lambda d: text in d.page_source)

    def notice(self):
        return self.driver.find_element(By.ID, "notice").text

    def chat(self, model, key=None):
        """Sends one chat completion through the gateway; answers its HTTP status."""
        return post_json(
            self.base + "/v1/chat/completions",
            {"model": model, "messages": [{"role": "user", "content": "Hello from the browser test"}]},
            {"Authorization": "Bearer " + (key or self.key)},
        )

    def h1(self):
        return self.driver.find_element(By.TAG_NAME, "h1").text

    def no_secret(self, where):
        assert self.token not in self.driver.page_source, f"{where}: the admin token is on the page"


def post_json(url, body, headers=None):
    """POSTs `body` as JSON; answers the HTTP status."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code


def is_attached(element):
    """Whether `element` is still in the document (a navigation replaces it)."""
    try:
        element.tag_name
        return True
    except Exception:  # StaleElementReferenceException, once the page is replaced
        return False


def page_name(path):
    """`/dashboard` is `overview`; `/dashboard/costs/quota-share` is `costs-quota-share`."""
    rest = path[len("/dashboard"):].strip("/")
    return rest.replace("/", "-") or "overview"


def sign_in(run):
    """Signs in with the token; lands on the overview and reads the navigation."""
    run.open("/dashboard")
    assert run.path() == "/dashboard/sign-in", run.path()
    run.driver.find_element(By.ID, "token").send_keys(run.token)
    run.click_and_wait(
        run.driver.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]"), "/dashboard"
    )
    assert run.h1() == "Overview", run.h1()
    run.no_secret("overview")
    for a in run.driver.find_elements(By.CSS_SELECTOR, "nav a"):
        path = a.get_attribute("href")[len(run.base):]
        run.pages.append((page_name(path), path, a.text))
    assert run.pages, "no navigation links"
    print(f"signed in: {len(run.pages)} navigation links")


def pages_fit_and_are_screenshotted(run):
    """Every navigation page at every width: a full-page screenshot, and no horizontal
    overflow of the document."""
    os.makedirs(run.out, exist_ok=True)
    overflowing = []
    for width in WIDTHS:
        run.viewport(width)
        for name, path, label in run.pages:
            run.open(path)
            title = run.h1()
            run.no_secret(name)
            file = os.path.join(run.out, f"{name}-{width}.png")
            run.screenshot(file)
            scroll, inner = run.driver.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth];"
            )
            fits = scroll <= inner
            if not fits:
                overflowing.append(f"{name} at {width} px ({scroll} > {inner})")
            state = page_state(run, label)
            print(f"page {name} at {width} px: {'fits' if fits else 'OVERFLOWS'}, {state}, {file}")
    assert not overflowing, "horizontal overflow: " + ", ".join(overflowing)


def page_state(run, label):
    """What the open page is, as `h1 "…", current nav "…", N main, N alerts`, after
    checking it is the page of the navigation link `label`: the link marked
    `aria-current` is that one, the h1 starts with its label, there is one `<main>`
    landmark and no error banner (`role=alert`)."""
    d = run.driver
    h1 = run.h1()
    current = [a.text for a in d.find_elements(By.CSS_SELECTOR, "nav a[aria-current=page]")]
    mains = len(d.find_elements(By.CSS_SELECTOR, "main#main"))
    alerts = [e.text for e in d.find_elements(By.CSS_SELECTOR, "[role=alert]")]
    assert current == [label], f"{label}: the current section is {current}"
    assert h1.startswith(label), f"{label}: the h1 is {h1!r}"
    assert mains == 1, f"{label}: {mains} main landmarks"
    assert not alerts, f"{label}: error banners {alerts}"
    return f'h1 "{h1}", current nav "{current[0]}", {mains} main, {len(alerts)} alerts'


def keyboard_reaches_skip_link_then_nav(run):
    """From the top of the overview, Tab focuses the skip link, then each navigation
    link in order."""
    run.viewport(WIDTHS[0])
    run.open("/dashboard")
    tabs = ActionChains(run.driver)

    def tab():
        tabs.send_keys(Keys.TAB).perform()
        return run.driver.switch_to.active_element

    skip = tab()
    assert skip.get_attribute("class") == "skip", skip.get_attribute("outerHTML")
    assert skip.get_attribute("href") == run.base + "/dashboard#main", skip.get_attribute("href")
    for _, path, label in run.pages:
        focused = tab()
        assert focused.tag_name == "a", focused.get_attribute("outerHTML")
        assert focused.get_attribute("href") == run.base + path, (
            f"expected {path}, focused {focused.get_attribute('outerHTML')}"
        )
    print(f"keyboard: Tab reaches the skip link, then {len(run.pages)} navigation links in order")


def create_a_pool_and_watch_traffic_move_it(run):
    """Creates a pool through the form, then sends requests as `k1` and sees the pool
    page's bar and allocation table change by themselves (the live region's refresh)."""
    run.viewport(WIDTHS[0])
    run.open("/dashboard/costs/quota-share")
    d = run.driver
    d.find_element(By.ID, "pool-id").send_keys("browser")
    d.find_element(By.ID, "pool-name").send_keys("Browser team")
    d.find_element(By.CSS_SELECTOR, "input[name=connection][value=alpha-1]").click()
    Select(d.find_element(By.NAME, "dim[0].unit")).select_by_value("requests")
    Select(d.find_element(By.NAME, "dim[0].window")).select_by_value("hourly")
    d.find_element(By.NAME, "dim[0].limit").send_keys("10")
    Select(d.find_element(By.NAME, "alloc[0].key")).select_by_value("k1")
    d.find_element(By.NAME, "alloc[0].weight").send_keys("50")
    # One more allocation row: the form comes back with every value kept.
    run.click_and_wait(
        d.find_element(By.CSS_SELECTOR, "button[name=add][value=alloc]"), "/dashboard/costs/quota-share"
    )
    rows = len(d.find_elements(By.CSS_SELECTOR, "#alloc-rows tbody tr"))
    assert rows == 2, rows
    kept = [
        d.find_element(By.ID, "pool-id").get_attribute("value"),
        d.find_element(By.NAME, "dim[0].limit").get_attribute("value"),
        Select(d.find_element(By.NAME, "alloc[0].key")).first_selected_option.get_attribute("value"),
        d.find_element(By.CSS_SELECTOR, "input[name=connection][value=alpha-1]").is_selected(),
    ]
    assert kept == ["browser", "10", "k1", True], kept
    Select(d.find_element(By.NAME, "alloc[1].key")).select_by_value("ops")
    d.find_element(By.NAME, "alloc[1].weight").send_keys("50")
    run.click_and_wait(
        d.find_element(By.XPATH, "//form[@action='/dashboard/costs/quota-share']/button[.='Create pool'][last()]"),
        "/dashboard/costs/quota-share",
    )
    assert run.notice() == "Done: Pool `browser` created.", run.notice()
    run.click_and_wait(d.find_element(By.LINK_TEXT, "Browser team"), "/dashboard/costs/quota-share/browser")
    assert "k1: 0</li>" in d.page_source, "k1 has used nothing yet"
    for _ in range(3):
        status = run.chat("alpha/mock-small")
        assert status == 200, status
    run.wait_for("k1: 3</li>")
    row = d.find_element(By.XPATH, "//table[caption='Allocations on requests:hourly']//tr[td[1]='k1']")
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:5] == ["k1", "3", "5", "surplus 2", "no"], cells
    run.screenshot(os.path.join(run.out, "pool-browser-1280.png"))
    print(
        "pool: created through the form's rows, one added in the browser; "
        "three requests moved the bar and the table to k1: 3 of a fair share of 5"
    )


def clear_a_cooldown(run):
    """Turns cooling on for `alpha-1` on the providers page (the harness turns it off),
    makes alpha answer a 429 with a two-minute retry-after, sees `alpha-1` cooling on
    the resilience page, clears it by selection, and sees it active again."""
    run.viewport(WIDTHS[0])
    run.open("/dashboard/providers")
    d = run.driver
    edit = "form[action='/dashboard/connections/alpha-1/update']"
    d.find_element(By.XPATH, "//summary[.='Edit alpha-1']").click()
    no_cooling = d.find_element(By.CSS_SELECTOR, edit + " input[name=disable_cooling]")
    assert no_cooling.is_selected(), "the harness's alpha-1 starts with cooling off"
    no_cooling.click()
    run.click_and_wait(d.find_element(By.CSS_SELECTOR, edit + " button[type=submit]"), "/dashboard/providers")
    assert run.notice() == "Done: Connection alpha-1 saved.", run.notice()
    rule = {"times": 1, "match": {"credential": run.alpha}, "status": 429, "headers": {"retry-after": "120"}}
    status = post_json(run.mock + "/_mock/rules", rule)
    assert status == 200, f"the mock refused the rule: {status}"
    status = run.chat("alpha/mock-small")
    assert status == 429, status
    run.open("/dashboard/resilience")
    selection = d.find_element(By.ID, "clear-selected").text
    assert "alpha-1 (cooling)" in selection, d.find_element(By.ID, "resilience-live").text
    d.find_element(By.ID, "select-alpha-1").click()
    run.click_and_wait(
        d.find_element(By.CSS_SELECTOR, "#clear-selected button[type=submit]"), "/dashboard/resilience"
    )
    assert run.notice() == "Done: 1 cleared, 0 unchanged, 0 skipped as terminal; 0 model locks cleared.", run.notice()
    selection = d.find_element(By.ID, "clear-selected").text
    assert "alpha-1 (active)" in selection, selection
    status = run.chat("alpha/mock-small")
    assert status == 200, status
    print("cooldown: alpha-1 cooled by a 429, cleared by selection, and serving again")


def a_request_shows_its_route(run):
    """Sends a request to the `fast` combo, opens its row's route on the requests page
    (SPEC R19's decision trace) and screenshots it."""
    run.viewport(WIDTHS[0])
    status = run.chat("fast")
    assert status == 200, status
    d = run.driver
    # The log is written in batches off the request path: the row comes within a second.
    for _ in range(50):
        run.open("/dashboard/requests?model=fast")
        if d.find_elements(By.CSS_SELECTOR, "details.route"):
            break
        time.sleep(0.1)
    route = d.find_element(By.CSS_SELECTOR, "details.route")
    route.find_element(By.TAG_NAME, "summary").click()
    steps = [li.text for li in route.find_elements(By.CSS_SELECTOR, "ol li")]
    # The pool made earlier reads the soft penalty for each candidate, shown under it.
    assert steps and steps[0].splitlines() == ["alpha/mock-small @ alpha-1", "penalty 1.0"], steps
    d.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'end'})", route)
    run.screenshot(os.path.join(run.out, "requests-route-1280.png"))
    print("route: the fast request's route opens on alpha/mock-small @ alpha-1 with its penalty 1.0")


def a_new_keys_secret_is_shown_once(run):
    """Creates a key: its secret is on the answer, works, and is on no page afterwards."""
    run.viewport(WIDTHS[0])
    run.open("/dashboard/keys")
    d = run.driver
    d.find_element(By.ID, "key-name").send_keys("browser key")
    d.find_element(By.CSS_SELECTOR, "form[action='/dashboard/keys'] button[type=submit]").click()
    WebDriverWait(d, 10).until(lambda d: d.find_elements(By.ID, "new-secret"))
    secret = d.find_element(By.ID, "new-secret").text.strip()
    assert secret.startswith("sy-") and len(secret) > 20, secret
    assert run.chat("fast", key=secret) == 200
    for _, path, _ in run.pages:
        run.open(path)
        assert secret not in d.page_source, f"the new key's secret is on {path}"
    print(f"key: the secret was shown once, works, and is on none of the {len(run.pages)} pages afterwards")


def form_of(run, action):
    """The action and the CSRF field of the open page's form posting to `action`."""
    form = run.driver.find_element(By.CSS_SELECTOR, f"form[action='{action}']")
    csrf = form.find_element(By.CSS_SELECTOR, "input[type=hidden][name=csrf]").get_attribute("value")
    assert len(csrf) == 64, csrf
    return form.get_attribute("action"), {"csrf": csrf}


def submit_injected(run, action, fields):
    """Submits a form built from `action` and `fields` on the open page (WebDriver's
    script runs outside the page's CSP, the form posts to the dashboard itself)."""
    run.driver.execute_script(
        """
        const [action, fields] = arguments;
        const form = document.createElement("form");
        form.method = "post";
        form.action = action;
        for (const [name, value] of Object.entries(fields)) {
            const input = document.createElement("input");
            input.type = "hidden";
            input.name = name;
            input.value = value;
            form.appendChild(input);
        }
        document.body.appendChild(form);
        form.submit();
        """,
        action,
        fields,
    )


def sign_out_ends_the_session(run):
    """Captures the key form (its action and CSRF token) while signed in, signs out,
    sees `/dashboard` land on the sign-in page, submits the captured form there: the
    old session's form is refused (403 Forbidden) and made no key. Then a wrong token is
    refused with its message, and the admin token signs in again at once."""
    d = run.driver
    run.viewport(WIDTHS[0])
    run.open("/dashboard/keys")
    action, fields = form_of(run, "/dashboard/keys")
    fields["name"] = "stale form key"
    run.open("/dashboard")
    run.click_and_wait(
        d.find_element(By.CSS_SELECTOR, "form[action='/dashboard/sign-out'] button[type=submit]"),
        "/dashboard/sign-in",
    )
    run.open("/dashboard")
    assert run.path() == "/dashboard/sign-in", run.path()
    assert d.find_element(By.ID, "token").get_attribute("type") == "password"
    assert not d.find_elements(By.TAG_NAME, "nav")
    print("sign out: /dashboard then lands on the sign-in page")

    before = d.find_element(By.TAG_NAME, "html")
    submit_injected(run, action, fields)
    WebDriverWait(d, 10).until(lambda d: not is_attached(before))
    assert run.path() == "/dashboard/keys", run.path()
    assert d.title == "Forbidden · Switchyard", d.title
    assert run.h1() == "Forbidden", run.h1()
    refusal = d.find_element(By.CSS_SELECTOR, "main p").text
    assert refusal == "This action needs a signed-in session and its form token. Sign in and try again.", refusal
    print(f"old session: its form to {action[len(run.base):]} answers \"{run.h1()}\"")

    run.open("/dashboard/sign-in")
    d.find_element(By.ID, "token").send_keys("not-the-admin-token")
    run.click_and_wait(d.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]"), "/dashboard/sign-in")
    wrong = d.find_element(By.ID, "sign-in-error").text
    d.find_element(By.ID, "token").send_keys(run.token)
    run.click_and_wait(d.find_element(By.CSS_SELECTOR, "form.sign-in button[type=submit]"), "/dashboard")
    assert run.h1() == "Overview", run.h1()
    run.open("/dashboard/keys")
    names = [td.text for td in d.find_elements(By.CSS_SELECTOR, "table td:nth-child(2)")]
    assert "stale form key" not in names, names
    print(f"sign in again: a wrong token says \"{wrong}\", then the admin token opens the overview; no stale form key")


FLOWS = [
    sign_in,
    pages_fit_and_are_screenshotted,
    keyboard_reaches_skip_link_then_nav,
    create_a_pool_and_watch_traffic_move_it,
    clear_a_cooldown,
    a_new_keys_secret_is_shown_once,
    a_request_shows_its_route,
    sign_out_ends_the_session,
]


def driver():
    options = Options()
    options.binary_location = CHROMIUM
    # Hidden scrollbars take no width, as on phones: the layout is exactly the viewport
    # wide, and a full-page screenshot shows the same layout as the viewport.
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(arg)
    options.add_argument(f"--window-size={WIDTHS[0]},{HEIGHT}")
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def main():
    base, token, out, mock, key, alpha = sys.argv[1:7]
    d = driver()
    try:
        run = Run(d, base, token, out, mock, key, alpha)
        for flow in FLOWS:
            try:
                flow(run)
            except AssertionError as e:
                print(f"FAILED {flow.__name__}: {e}")
                return 1
    finally:
        d.quit()
    print("all flows passed")
    return 0


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main())
