// A Foxglove WebSocket viewer for the tests, built on Foxglove's own protocol client.
//
// Usage: node foxglove_client.mjs ws://HOST:PORT [SUBPROTOCOL,...] [ros2-only]
// (the subprotocols offered: by default "foxglove.sdk.v1" and "foxglove.websocket.v1").
// With "ros2-only" it filters as PlotJuggler's Foxglove WebSocket client does: only channels
// with encoding "cdr" and schemaEncoding "ros2msg" are subscribed; their CDR messages are
// decoded with @foxglove/rosmsg2-serialization (uint64 and int64 values printed as strings).
// It subscribes to every channel the server advertises and prints one JSON object per line:
//   {"kind":"open"}
//   {"kind":"advertise","id":N,"topic":"/x","encoding":"json","schemaName":"x",
//    "schemaEncoding":"jsonschema","schema":"{...}"}
//   {"kind":"unadvertise","ids":[N]}
//   {"kind":"message","topic":"/x","logTime":"<ns>","receiveTime":"<ns, wall clock>","data":{...}}
//   {"kind":"parameters","parameters":[{"name":"P","value":1}]}
//   {"kind":"serverInfo","capabilities":["parameters","time"]}
//   {"kind":"time","time":"<ns>"}     (the server's time, with its "time" capability)
//   {"kind":"close"}
// Lines read from stdin are commands: "params" asks for every parameter, "quit" closes.
// SUBSCRIBE_DELAY_MS in the environment: subscribe that long after each advertisement, as a
// viewer that sets up heavier panels first does.
import { createRequire } from "node:module";
import { createInterface } from "node:readline";

const require = createRequire(import.meta.url);
const { FoxgloveClient } = require("@foxglove/ws-protocol");
const { WebSocket } = require("ws");
const { parse } = require("@foxglove/rosmsg");
const { MessageReader } = require("@foxglove/rosmsg2-serialization");

const url = process.argv[2];
if (!url) {
  process.stderr.write("usage: node foxglove_client.mjs ws://HOST:PORT\n");
  process.exit(2);
}

// foxglove-sdk 0.30 accepts "foxglove.sdk.v1" only; the client speaks the older name too, which
// is all Foxglove Studio 1.x offers (ulogstream's front answers both).
const subprotocols = process.argv[3]
  ? process.argv[3].split(",")
  : ["foxglove.sdk.v1", FoxgloveClient.SUPPORTED_SUBPROTOCOL];
const ros2Only = process.argv[4] === "ros2-only";
const subscribeDelayMs = Number(process.env.SUBSCRIBE_DELAY_MS ?? 0);
const ws = new WebSocket(url, subprotocols);
const readers = new Map(); // subscription id -> CDR MessageReader
const client = new FoxgloveClient({ ws });
const topics = new Map(); // subscription id -> topic
const decoder = new TextDecoder();

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + "\n");
}

client.on("open", () => emit({ kind: "open" }));
client.on("error", (err) => process.stderr.write(`client error: ${err}\n`));
client.on("close", () => {
  // stdout is a pipe, written asynchronously on POSIX: exit only once every line is out (an
  // exit at once drops the lines still queued, the close among them, when the reader lags).
  process.stdout.write(JSON.stringify({ kind: "close" }) + "\n", () => process.exit(0));
});
client.on("advertise", (channels) => {
  for (const channel of channels) {
    emit({
      kind: "advertise",
      id: channel.id,
      topic: channel.topic,
      encoding: channel.encoding,
      schemaName: channel.schemaName,
      schemaEncoding: channel.schemaEncoding,
      schema: channel.schema,
    });
    if (ros2Only && !(channel.encoding === "cdr" && channel.schemaEncoding === "ros2msg")) {
      continue; // what PlotJuggler leaves out
    }
    const subscribe = () => {
      const id = client.subscribe(channel.id);
      topics.set(id, channel.topic);
      if (channel.encoding === "cdr") {
        readers.set(id, new MessageReader(parse(channel.schema, { ros2: true })));
      }
    };
    if (subscribeDelayMs > 0) {
      setTimeout(subscribe, subscribeDelayMs);
    } else {
      subscribe();
    }
  }
});

// Decoded CDR as JSON: 64-bit integers as strings, typed arrays as arrays.
function plain(value) {
  if (typeof value === "bigint") return value.toString();
  if (ArrayBuffer.isView(value)) return Array.from(value, plain);
  if (Array.isArray(value)) return value.map(plain);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
  }
  return value;
}
client.on("unadvertise", (ids) => emit({ kind: "unadvertise", ids }));
client.on("message", ({ subscriptionId, timestamp, data }) => {
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const reader = readers.get(subscriptionId);
  emit({
    kind: "message",
    topic: topics.get(subscriptionId),
    logTime: timestamp.toString(),
    receiveTime: (BigInt(Date.now()) * 1000000n).toString(),
    data: reader ? plain(reader.readMessage(bytes)) : JSON.parse(decoder.decode(bytes)),
  });
});
client.on("parameterValues", ({ parameters }) => emit({ kind: "parameters", parameters }));
client.on("serverInfo", ({ capabilities }) => emit({ kind: "serverInfo", capabilities }));
client.on("time", ({ timestamp }) => emit({ kind: "time", time: timestamp.toString() }));

createInterface({ input: process.stdin }).on("line", (line) => {
  const command = line.trim();
  if (command === "params") {
    client.getParameters([], "all");
  } else if (command === "quit") {
    client.close();
  }
});
