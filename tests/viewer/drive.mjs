// Drives Foxglove Studio 1.48 (index.html) in Debian's chromium, headless, as a user would:
// the page connects to a live view, then this script waits for the Plot and Raw Messages
// panels to show data, opens the Problems tab, downloads the plot's data with the Plot panel's
// own "Download plot data as CSV" button and takes a screenshot.
//
// Usage: node drive.mjs PAGE_URL OUT_DIR WATCH_SECONDS
// Prints one JSON object: {"problems": "<the Problems tab's text>", "csv": "<path>",
// "screenshot": "<path>", "rawMessages": "<the Raw Messages panel's text>", "errors": [...]}.
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(import.meta.url);
const { chromium } = require("playwright-core");

const [pageUrl, outDir, watchSeconds] = process.argv.slice(2);
if (!pageUrl || !outDir) {
  process.stderr.write("usage: node drive.mjs PAGE_URL OUT_DIR WATCH_SECONDS\n");
  process.exit(2);
}

// The flags Debian's chromium needs on a machine with no network and no GPU, run as root.
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const errors = [];
try {
  const context = await browser.newContext({
    viewport: { width: 1400, height: 800 },
    acceptDownloads: true,
  });
  const page = await context.newPage();
  page.on("pageerror", (err) => errors.push(`page error: ${err}`));
  await page.goto(pageUrl);
  // Data has arrived once the Raw Messages panel shows a message (its timestamp field).
  const rawPanel = page.locator('[data-testid^="panel-mouseenter-container RawMessages"]');
  await rawPanel.getByText("timestamp", { exact: true }).first().waitFor({ timeout: 90_000 });
  await page.waitForTimeout(Number(watchSeconds || 10) * 1000);
  const rawMessages = await rawPanel.innerText();
  // The data source sidebar's Problems tab: "No problems found", or one entry per problem.
  await page.getByRole("tab", { name: "Problems" }).click();
  const problems = await page.locator('[class*="tabContent"]').innerText();
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.getByTitle("Download plot data as CSV").click(),
  ]);
  const csv = join(outDir, "plot_data.csv");
  await download.saveAs(csv);
  const screenshot = join(outDir, "foxglove-live-plot.png");
  await page.screenshot({ path: screenshot });
  process.stdout.write(
    JSON.stringify({ problems: problems.trim(), csv, screenshot, rawMessages, errors }) + "\n",
  );
} finally {
  await browser.close();
}
