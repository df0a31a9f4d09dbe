// wedge.test.mjs with a mixture of experts as the served model (issue 19): a tiny gpt_oss
// (MXFP4 experts, sinks, a windowed layer) whose real stalled step and crashing engine
// are caught, its requests ended with a clear error in the endpoint's own format while
// /health answers (503 naming it), the engine killed and restarted, the cached prompt's
// greedy tokens unchanged; the settings-file TTL, unload and SIGKILL cases as well.
import { serveMoeInWedgeSuites } from './wedge_moe_model.mjs';

serveMoeInWedgeSuites('gpt_oss', 'mxfp4');
await import('./wedge.test.mjs');
