/**
 * durablecache-client: durable subscriptions to durablecache regions over
 * websockets, for browsers and Node. Usage: README.md; protocol: docs/protocol.md.
 */

export { DurableClient } from "./client.js";
export type { DurableClientOptions } from "./options.js";
export { Region, type CqOptions, type InterestOptions } from "./region.js";
export type { CacheEntry } from "./cache.js";
export type {
  CacheListener,
  CqEvent,
  CqListener,
  CqMatch,
  CqOp,
  EntryEvent,
  Gap,
  JsonObject,
  JsonValue,
  Marker,
  Op,
  Policy,
  RegionLiveEvent,
  Welcome,
  Written,
} from "./events.js";
export {
  AlreadyConnectedError,
  AuthenticationError,
  ClientClosedError,
  ClosedByOperatorError,
  ConnectFailedError,
  DurableCacheError,
  DurableIdOwnedError,
  FatalConnectionError,
  FrameTooLargeError,
  ListenerError,
  ProtocolError,
  RequestTimeoutError,
} from "./errors.js";
export type { Scheduler, TimerHandle } from "./scheduler.js";
export type { WebSocketConstructor, WebSocketLike } from "./socket.js";
