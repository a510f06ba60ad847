// Mounts Foxglove Studio (the bundle's globals) with one layout: a Plot panel and a Raw Messages
// panel on the topic path in the page's "plot" parameter (e.g. /vehicle_local_position.z), the
// plot placing each point at its message's header.stamp ("stamp=receive": at its receive time,
// for messages without a header). The page's "ds" parameters (Studio's own deep link) connect
// it: ?ds=foxglove-websocket&ds.url=ws://HOST:PORT&plot=/topic.field
"use strict";

const params = new URLSearchParams(window.location.search);
const plotPath = params.get("plot") || "/vehicle_local_position.z";
const topic = plotPath.slice(0, plotPath.indexOf(".") < 0 ? undefined : plotPath.indexOf("."));
const timestampMethod = params.get("stamp") === "receive" ? "receiveTime" : "headerStamp";
const LAYOUT_ID = "ulogstream-test";

const layoutData = {
  configById: {
    "Plot!ulogstream": {
      paths: [{ value: plotPath, enabled: true, timestampMethod }],
      showLegend: true,
      legendDisplay: "floating",
      showPlotValuesInLegend: false,
      showXAxisLabels: true,
      showYAxisLabels: true,
      isSynced: true,
      xAxisVal: "timestamp",
      sidebarDimension: 240,
    },
    "RawMessages!ulogstream": {
      topicPath: topic,
      diffTopicPath: "",
      diffMethod: "custom",
      diffEnabled: false,
      showFullMessageForDiff: false,
      expansion: "all",
    },
  },
  globalVariables: {},
  userNodes: {},
  playbackConfig: { speed: 1 },
  layout: {
    first: "Plot!ulogstream",
    second: "RawMessages!ulogstream",
    direction: "row",
    splitPercentage: 60,
  },
};

const layout = {
  id: LAYOUT_ID,
  name: "ulogstream test",
  permission: "CREATOR_WRITE",
  baseline: { data: layoutData, savedAt: undefined },
  working: undefined,
  syncInfo: undefined,
};

// Layouts kept in memory: the test's one, and whatever Studio saves.
const layouts = new Map([[LAYOUT_ID, layout]]);
const layoutStorage = {
  list: async () => [...layouts.values()],
  get: async (_namespace, id) => layouts.get(id),
  put: async (_namespace, value) => {
    layouts.set(value.id, value);
    return value;
  },
  delete: async (_namespace, id) => {
    layouts.delete(id);
  },
  migrateUnnamespacedLayouts: async () => {},
  importLayouts: async () => {},
};

// Settings kept in memory (Studio's web app keeps them in localStorage).
const settings = new Map();
const listeners = new Map();
const appConfiguration = {
  get: (key) => settings.get(key),
  set: async (key, value) => {
    settings.set(key, value);
    for (const cb of listeners.get(key) || []) cb(value);
  },
  addChangeListener: (key, cb) => listeners.set(key, [...(listeners.get(key) || []), cb]),
  removeChangeListener: (key, cb) =>
    listeners.set(key, (listeners.get(key) || []).filter((other) => other !== cb)),
};

// Select the test's layout: Studio reads the current layout from the user profile.
localStorage.setItem("studio.profile-data", JSON.stringify({ currentLayoutId: LAYOUT_ID }));

async function main() {
  await window.initI18n();
  const app = React.createElement(window.App, {
    deepLinks: [window.location.href],
    appConfiguration,
    dataSources: [new window.FoxgloveWebSocketDataSourceFactory()],
    layoutStorage,
    extensionLoaders: [],
    enableLaunchPreferenceScreen: false,
    enableGlobalCss: true,
  });
  ReactDOM.render(app, document.getElementById("root"));
}

main().catch((err) => {
  document.body.textContent = `studio.js failed: ${err && err.stack ? err.stack : err}`;
});
