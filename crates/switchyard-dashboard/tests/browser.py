"""Drives the dashboard in headless Chromium (Debian's `chromium` and
`/usr/bin/chromedriver`) through Selenium.

Usage: browser.py BASE_URL ADMIN_TOKEN SCREENSHOT_DIR

Each flow is a function taking the `Run` (driver, base URL, token, output folder); `FLOWS`
lists them in the order they run. A flow raises `AssertionError` on a failure; the
script prints one line per check and exits 1 after the first failing flow.

Pages come from the `<nav>` links of the signed-in overview, so a page added to the
navigation is screenshotted and checked without touching this script.
"""

import os
import sys
import base64

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# The widths every page is checked at: a laptop and a phone.
WIDTHS = (1280, 390)
HEIGHT = 900


class Run:
    """What every flow works with."""

    def __init__(self, driver, base, token, out):
        self.driver = driver
        self.base = base.rstrip("/")
        self.token = token
        self.out = out
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

    def h1(self):
        return self.driver.find_element(By.TAG_NAME, "h1").text

    def no_secret(self, where):
        assert self.token not in self.driver.page_source, f"{where}: the admin token is on the page"


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
            assert title != "Not found", f"{path} answers Not found"
            state = "built"
            print(f"page {name} at {width} px: {'fits' if fits else 'OVERFLOWS'}, {state}, {file}")
    assert not overflowing, "horizontal overflow: " + ", ".join(overflowing)


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


def sign_out_ends_the_session(run):
    """Sign out, then `/dashboard` lands on the sign-in page."""
    run.open("/dashboard")
    run.click_and_wait(
        run.driver.find_element(
            By.CSS_SELECTOR, "form[action='/dashboard/sign-out'] button[type=submit]"
        ),
        "/dashboard/sign-in",
    )
    run.open("/dashboard")
    assert run.path() == "/dashboard/sign-in", run.path()
    assert run.driver.find_element(By.ID, "token").get_attribute("type") == "password"
    assert not run.driver.find_elements(By.TAG_NAME, "nav")
    print("sign out: /dashboard then lands on the sign-in page")


FLOWS = [
    sign_in,
    pages_fit_and_are_screenshotted,
    keyboard_reaches_skip_link_then_nav,
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
    base, token, out = sys.argv[1:4]
    d = driver()
    try:
        run = Run(d, base, token, out)
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
