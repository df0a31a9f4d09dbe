// wedge.test.mjs with GLM-5's architecture as the served model (issue 32): a tiny
// glm_moe_dsa (multi-head latent attention over the latent KV cache, the DSA indexer
// choosing 16 earlier tokens a query, shared selections, grouped sigmoid MoE) whose real
// stalled step and crashing engine are caught, its requests ended with a clear error in
// the endpoint's own format while /health answers, the engine killed and restarted, the
// cached prompt's greedy tokens unchanged; the settings-file TTL, unload and SIGKILL
// cases as well.
import { serveMoeInWedgeSuites } from './wedge_moe_model.mjs';

serveMoeInWedgeSuites('glm_moe_dsa', 'f32');
await import('./wedge.test.mjs');
