/**
 * The objects handed to the application, parsed from server frames, and the
 * listener interfaces. Frame shapes: docs/protocol.md,
 * "Server → client frames". Unknown frame fields are
 * ignored so an older client keeps working against a newer server; a new
 * field the client should expose is added to the matching parser here.
 */

/** Any RFC 8259 JSON value. */
export type JsonValue =
  null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** A JSON object, as frames are. */
export type JsonObject = { [key: string]: JsonValue };

/** What changed: an entry op or a region op. */
export type Op = "create" | "update" | "destroy" | "invalidate" | "region_clear" | "region_destroy";

/** How a change moved an entry in or out of a continuous query's result. */
export type CqOp = "create" | "update" | "destroy" | "region_clear" | "region_destroy";

/** Result policy of an interest's initial image. */
export type Policy = "keys_values" | "keys" | "none";

/** A queue overflow the server recorded (README.md, "Behaviour"): changes after `since` may be missing. */
export interface Gap {
  readonly since: number;
  readonly dropped: number;
  readonly reason: string;
}

/** The server's answer to `hello`. */
export interface Welcome {
  readonly durableId: string | null;
  readonly node: string | null;
  readonly primary: string | null;
  readonly secondaries: readonly string[];
  /** -2: no queue existed; -1: the queue was lost; n: queued events to replay. */
  readonly pendingEvents: number;
  readonly redundancySatisfied: boolean;
  /** The overflow the queue recorded, or null. */
  readonly gap: Gap | null;
  /** The url that answered (after redirects, without the token). */
  readonly url: string;
}

/** The end of a replay: `replayed` events and `resynced` entries came before it. */
export interface Marker {
  readonly replayed: number;
  readonly resynced: number;
  readonly regions: readonly string[];
}

/** The answer to `region.put`. */
export interface Written {
  readonly region: string;
  readonly key: string;
  readonly op: Op;
  readonly version: number;
  readonly eventId: string;
}

/** One CQ a change concerns, as the event frame lists it. */
export interface CqMatch {
  readonly name: string;
  readonly cqOp: CqOp;
}

/**
 * One change. `isReplay` is the frame's `replay`. A resync event
 * (`isResync`) stands for a change the client missed and recovered by key
 * (README.md, "Behaviour"); it is not an event of the log, so its `id` and `seq` are null.
 */
export interface EntryEvent {
  readonly id: string | null;
  readonly seq: number | null;
  readonly region: string;
  /** Null for `region_clear` and `region_destroy`. */
  readonly key: string | null;
  readonly op: Op;
  readonly value: JsonValue;
  readonly version: number | null;
  readonly ts: string | null;
  readonly isReplay: boolean;
  readonly isResync: boolean;
  /** The CQs of this client the change concerns (empty for none). */
  readonly cq: readonly CqMatch[];
}

/** A change as one continuous query sees it (Geode's CqEvent). */
export interface CqEvent extends EntryEvent {
  readonly cqName: string;
  /** The entry's op (a left marker of a resync says `update` or `destroy`). */
  readonly baseOp: Op;
  /** How the entry's membership changed. */
  readonly queryOp: CqOp;
}

/** Passed to `afterRegionLive`: the replay of `region` is over. */
export interface RegionLiveEvent {
  readonly region: string;
  readonly replayed: number;
}

/**
 * Receives the events of one region; implement the methods you need. A
 * method may return a promise: the next event waits for it. A throw or a
 * rejection goes to the client's `onError` and delivery goes on.
 */
export interface CacheListener {
  afterCreate?(event: EntryEvent): unknown;
  afterUpdate?(event: EntryEvent): unknown;
  afterDestroy?(event: EntryEvent): unknown;
  /** The value is now null; the key stays. */
  afterInvalidate?(event: EntryEvent): unknown;
  afterRegionClear?(event: EntryEvent): unknown;
  afterRegionDestroy?(event: EntryEvent): unknown;
  /** Once per region named by each `marker`, after the replayed events. */
  afterRegionLive?(event: RegionLiveEvent): unknown;
}

/** Receives the events of one continuous query (Geode's CqListener). */
export interface CqListener {
  onEvent(event: CqEvent): unknown;
  /** The CQ could not be registered again after a reconnect. */
  onError?(error: Error): unknown;
  /** The CQ ended: closed by an operator or by a `region_destroy`. */
  onClose?(): unknown;
}

/** The CacheListener method for each op. */
export const LISTENER_METHODS = {
  create: "afterCreate",
  update: "afterUpdate",
  destroy: "afterDestroy",
  invalidate: "afterInvalidate",
  region_clear: "afterRegionClear",
  region_destroy: "afterRegionDestroy",
} as const satisfies Record<Op, keyof CacheListener>;

const OPS: ReadonlySet<string> = new Set(Object.keys(LISTENER_METHODS));
const CQ_OPS: ReadonlySet<string> = new Set([
  "create",
  "update",
  "destroy",
  "region_clear",
  "region_destroy",
]);

/** Return `value` when it is a JSON object, else null. */
export function asObject(value: unknown): JsonObject | null {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as JsonObject)
    : null;
}

function str(value: JsonValue | undefined): string | null {
  return typeof value === "string" ? value : null;
}

function int(value: JsonValue | undefined): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

function strings(value: JsonValue | undefined): string[] {
  return Array.isArray(value) ? value.filter((v) => typeof v === "string") : [];
}

/** Parse a `gap` field or frame; null when absent or malformed. */
export function parseGap(value: JsonValue | undefined): Gap | null {
  const frame = asObject(value);
  const since = frame ? int(frame["since"]) : null;
  if (frame === null || since === null) return null;
  return {
    since,
    dropped: int(frame["dropped"]) ?? 0,
    reason: str(frame["reason"]) ?? "",
  };
}

/** Parse a `welcome` frame received on `url`. */
export function parseWelcome(frame: JsonObject, url: string): Welcome {
  return {
    durableId: str(frame["durable_id"]),
    node: str(frame["node"]),
    primary: str(frame["primary"]),
    secondaries: strings(frame["secondaries"]),
    pendingEvents: int(frame["pending_events"]) ?? -2,
    redundancySatisfied: frame["redundancy_satisfied"] !== false,
    gap: parseGap(frame["gap"]),
    url,
  };
}

/** Parse a `marker` frame. */
export function parseMarker(frame: JsonObject): Marker {
  return {
    replayed: int(frame["replayed"]) ?? 0,
    resynced: int(frame["resynced"]) ?? 0,
    regions: strings(frame["regions"]),
  };
}

/** Parse a `written` frame. */
export function parseWritten(frame: JsonObject): Written {
  return {
    region: str(frame["region"]) ?? "",
    key: str(frame["key"]) ?? "",
    op: (str(frame["op"]) ?? "update") as Op,
    version: int(frame["version"]) ?? 0,
    eventId: str(frame["event_id"]) ?? "",
  };
}

function parseCq(value: JsonValue | undefined): CqMatch[] {
  if (!Array.isArray(value)) return [];
  const matches: CqMatch[] = [];
  for (const item of value) {
    const obj = asObject(item);
    const name = obj ? str(obj["name"]) : null;
    const cqOp = obj ? str(obj["cq_op"]) : null;
    if (name !== null && cqOp !== null && CQ_OPS.has(cqOp)) {
      matches.push({ name, cqOp: cqOp as CqOp });
    }
  }
  return matches;
}

/** Parse an `event` frame; null when a required field is missing. */
export function parseEvent(frame: JsonObject): EntryEvent | null {
  const id = str(frame["id"]);
  const seq = int(frame["seq"]);
  const region = str(frame["region"]);
  const op = str(frame["op"]);
  if (id === null || seq === null || region === null || op === null || !OPS.has(op)) {
    return null;
  }
  return {
    id,
    seq,
    region,
    key: str(frame["key"]),
    op: op as Op,
    value: frame["value"] ?? null,
    version: int(frame["version"]),
    ts: str(frame["ts"]),
    isReplay: frame["replay"] === true,
    isResync: false,
    cq: parseCq(frame["cq"]),
  };
}

/** Build the event that hands a key recovered by a resync to a listener. */
export function resyncEvent(
  region: string,
  key: string,
  op: "create" | "update" | "destroy",
  value: JsonValue,
  version: number | null,
): EntryEvent {
  return {
    id: null,
    seq: null,
    region,
    key,
    op,
    value,
    version,
    ts: null,
    isReplay: true,
    isResync: true,
    cq: [],
  };
}

/** Build the CqEvent of `event` for the CQ `name`. */
export function cqEvent(event: EntryEvent, name: string, queryOp: CqOp): CqEvent {
  return { ...event, cqName: name, baseOp: event.op, queryOp };
}
