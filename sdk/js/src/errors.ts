/**
 * Errors raised by the client. Error codes and close codes: docs/protocol.md,
 * "Errors and close codes"; which close codes end the client: README.md.
 */

/** An `error` frame the server sent in reply to a request, or a client failure. */
export class DurableCacheError extends Error {
  override readonly name: string = "DurableCacheError";
  /** The protocol's error code (`bad_field`, `no_such_region`, ...). */
  readonly code: string;

  constructor(code: string, message = "", options?: { cause?: unknown }) {
    super(message ? `${code}: ${message}` : code, options);
    this.code = code;
  }
}

/** The server refused this client in a way a reconnect cannot fix. */
export class FatalConnectionError extends DurableCacheError {
  override readonly name: string = "FatalConnectionError";
  /** The websocket close code (or 4409 after the bounded conflict retries). */
  readonly closeCode: number;
  /** The close frame's reason, as the server gave it. */
  readonly reason: string;

  constructor(closeCode: number, reason = "") {
    super(`closed_${closeCode}`, reason);
    this.closeCode = closeCode;
    this.reason = reason;
  }
}

/** 4401: no token, an invalid one, or an inactive user. */
export class AuthenticationError extends FatalConnectionError {
  override readonly name: string = "AuthenticationError";
}

/** 4403: the durable id belongs to another user. */
export class DurableIdOwnedError extends FatalConnectionError {
  override readonly name: string = "DurableIdOwnedError";
}

/** 4409: the durable id stayed connected elsewhere through every retry. */
export class AlreadyConnectedError extends FatalConnectionError {
  override readonly name: string = "AlreadyConnectedError";
}

/** 4410: an operator closed this durable client; its queue is gone. */
export class ClosedByOperatorError extends FatalConnectionError {
  override readonly name: string = "ClosedByOperatorError";
}

/** 4413: a frame was larger than the server's DURABLECACHE_MAX_FRAME_BYTES. */
export class FrameTooLargeError extends FatalConnectionError {
  override readonly name: string = "FrameTooLargeError";
}

/** 4400: the server saw a protocol violation (or ten bad frames in a row). */
export class ProtocolError extends FatalConnectionError {
  override readonly name: string = "ProtocolError";
}

const FATAL_CLASSES: ReadonlyMap<number, typeof FatalConnectionError> = new Map([
  [4400, ProtocolError],
  [4401, AuthenticationError],
  [4403, DurableIdOwnedError],
  [4409, AlreadyConnectedError],
  [4410, ClosedByOperatorError],
  [4413, FrameTooLargeError],
]);

/** Close codes after which reconnecting cannot help (4409 is retried first). */
export const FATAL_CLOSE_CODES: ReadonlySet<number> = new Set([4400, 4401, 4403, 4410, 4413]);

/** The close code of "durable id already connected". */
export const CONFLICT_CLOSE_CODE = 4409;

/** Return the exception class that stands for a fatal close `code`. */
export function fatalCloseError(code: number, reason = ""): FatalConnectionError {
  const Class = FATAL_CLASSES.get(code) ?? FatalConnectionError;
  return new Class(code, reason);
}

/** No url of the list answered `welcome` within `connectTimeout`. */
export class ConnectFailedError extends DurableCacheError {
  override readonly name: string = "ConnectFailedError";
  constructor(message: string) {
    super("connect_failed", message);
  }
}

/** The client was closed (by `close()` or a fatal error); make a new one. */
export class ClientClosedError extends DurableCacheError {
  override readonly name: string = "ClientClosedError";
  constructor(message = "the client is closed") {
    super("client_closed", message);
  }
}

/** A request got no reply within `requestTimeout`, reconnects included. */
export class RequestTimeoutError extends DurableCacheError {
  override readonly name: string = "RequestTimeoutError";
  constructor(message = "no reply within requestTimeout") {
    super("timeout", message);
  }
}

/** A listener or callback threw; handed to `onError` with the cause. */
export class ListenerError extends DurableCacheError {
  override readonly name: string = "ListenerError";
  constructor(cause: unknown) {
    super("listener_failed", String(cause), { cause });
  }
}

/** The socket carrying a request went away; the request is retried. */
export class SessionLostError extends Error {
  override readonly name: string = "SessionLostError";
}

/** A connection attempt failed in a way a later attempt may not. */
export class TransientError extends Error {
  override readonly name: string = "TransientError";
  /** The close code that ended the attempt, when there was one. */
  readonly closeCode: number | null;

  constructor(message: string, closeCode: number | null = null) {
    super(message);
    this.closeCode = closeCode;
  }
}
