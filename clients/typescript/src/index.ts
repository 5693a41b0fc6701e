/**
 * @agentrt/client: drive the agentrt mesh from TypeScript (Node 20+, gRPC over HTTP/2).
 *
 * `AgentrtClient` starts runs, iterates their events with automatic resume, answers
 * approvals and reads sessions; failures are `AgentrtError`s with a typed `ErrorReason`.
 * The generated messages and services of every agentrt.v1 contract are exported too.
 */
export { AgentrtClient, TENANT_HEADER, metadataInterceptor } from "./client.js";
export type { ClientOptions, Decision, ExternalResult, StartRunInit } from "./client.js";
export { AgentrtError, ERROR_DOMAIN, codeName, reasonFromName, toAgentrtError } from "./errors.js";
export { eventsOf, followEvents } from "./events.js";
export type { EventTarget, FollowOptions, Reconnect } from "./events.js";
export { ErrorReason } from "./gen/agentrt/v1/error_reason_pb.js";
export { Code } from "@connectrpc/connect";
export * from "./gen/agentrt/v1/common_pb.js";
export * from "./gen/agentrt/v1/run_service_pb.js";
export * from "./gen/agentrt/v1/session_service_pb.js";
export * from "./gen/agentrt/v1/tool_service_pb.js";
export * from "./gen/agentrt/v1/gateway_service_pb.js";
export * from "./gen/agentrt/v1/task_service_pb.js";
