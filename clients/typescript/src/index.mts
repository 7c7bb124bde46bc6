// The package's entry point: the native client and its events stream. The AG-UI agent is the `./ag-ui`
// entry (it needs the optional peer dependency @ag-ui/client).
export * from "./client.mjs";
export * from "./events.mjs";
