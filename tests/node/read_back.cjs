// Reads a ROS 1 bag or an MCAP file the way Foxglove opens one, and prints how many messages
// each topic has, as JSON: {"/topic": count, ...}.
//   node read_back.cjs bag|mcap FILE
// Bags: @foxglove/rosbag's Bag (Foxglove's own reader) iterated from the bag's start time,
// each message deserialized. MCAP: @mcap/core's indexed reader from the summary's start to end
// time, each message deserialized with @foxglove/rosmsg2-serialization (zstd chunks by fzstd).
"use strict";

const fs = require("fs/promises");

async function countBag(path) {
  const { Bag } = require("@foxglove/rosbag");
  const { FileReader } = require("@foxglove/rosbag/node");
  const bag = new Bag(new FileReader(path));
  await bag.open();
  const counts = {};
  for await (const event of bag.messageIterator({ start: bag.startTime })) {
    if (event.message === undefined) {
      throw new Error(`message on ${event.topic} did not deserialize`);
    }
    counts[event.topic] = (counts[event.topic] ?? 0) + 1;
  }
  return counts;
}

async function countMcap(path) {
  const { McapIndexedReader } = require("@mcap/core");
  const { MessageReader } = require("@foxglove/rosmsg2-serialization");
  const { parse } = require("@foxglove/rosmsg");
  const { decompress } = require("fzstd");
  const handle = await fs.open(path, "r");
  try {
    const readable = {
      size: async () => BigInt((await handle.stat()).size),
      read: async (offset, size) => {
        const buffer = new Uint8Array(Number(size));
        await handle.read(buffer, 0, Number(size), Number(offset));
        return buffer;
      },
    };
    const reader = await McapIndexedReader.Initialize({
      readable,
      decompressHandlers: {
        zstd: (data, size) => decompress(data, new Uint8Array(Number(size))),
      },
    });
    const readers = new Map();
    for (const [id, channel] of reader.channelsById) {
      const schema = reader.schemasById.get(channel.schemaId);
      const text = new TextDecoder().decode(schema.data);
      readers.set(id, new MessageReader(parse(text, { ros2: true })));
    }
    const counts = {};
    const stats = reader.statistics;
    const range = stats ? { startTime: stats.messageStartTime, endTime: stats.messageEndTime } : {};
    for await (const message of reader.readMessages(range)) {
      readers.get(message.channelId).readMessage(message.data);
      const topic = reader.channelsById.get(message.channelId).topic;
      counts[topic] = (counts[topic] ?? 0) + 1;
    }
    return counts;
  } finally {
    await handle.close();
  }
}

async function main() {
  const [kind, path] = process.argv.slice(2);
  const count = { bag: countBag, mcap: countMcap }[kind];
  if (count === undefined || path === undefined) {
    console.error("usage: node read_back.cjs bag|mcap FILE");
    process.exit(2);
  }
  process.stdout.write(JSON.stringify(await count(path)) + "\n");
}

main().catch((err) => {
  console.error(`read_back: ${err.stack ?? err}`);
  process.exit(1);
});
