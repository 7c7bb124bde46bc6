// The active run (docs/integration.md "Abort and interrupt"): the Stop button (POST /abort) and the send options while a run is
// active (steer, follow up, interrupt), each aimed at the run shown (`expected_run_id`), so a
// message typed while a run was ending never lands in a run the user did not see.
import { api, sessionPath } from "./api.js";

export const BUSY_MODES = { steer: "steer", follow_up: "follow up", interrupt: "interrupt" };

/** The message body: with the run id the page shows while it runs, so the server refuses (409) a
 *  message aimed at a run that has already ended instead of queueing it elsewhere. */
export function messageBody(text, onBusy, run, clientContext, attachments = []) {
  const body = { message: text, client_context: clientContext, on_busy: onBusy };
  if (attachments.length) body.attachments = attachments; // workspace paths (js/attach.js)
  if (run.running && run.id) body.expected_run_id = run.id;
  return body;
}

/** Stops the run shown: answers once it has ended. `aborted: false` means none was running. */
export async function stopRun(sid, run) {
  const json = run.id ? { expected_run_id: run.id } : {};
  return api(sessionPath(sid, "/abort"), { method: "POST", json });
}

/** The timeline line for a `run_aborted` event. */
export function abortedText(d) {
  const why = d.reason === "interrupt" ? "interrupted by a new message" : "stopped by the user";
  const kept = d.kept ? `; ${d.kept} queued message${d.kept > 1 ? "s" : ""} kept for the next prompt` : "";
  return `the run was ${why}${kept}`;
}
