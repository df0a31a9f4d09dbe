// wedge_scenarios.test.mjs with a mixture of experts as the served model (issue 19): a
// tiny qwen3_moe under issue 8's scenarios with the SSD tier on: slow stores, prewarm
// loops, aborts while blocks restore, a second model under a tight budget, unload
// during traffic, every fault kind, a SIGSTOPped engine of two (the other model keeps
// answering) and one resumed in time.
import { serveMoeInWedgeSuites } from './wedge_moe_model.mjs';

// One round of each scenario unless WEDGE_ROUNDS says otherwise (the dense suite runs two).
process.env.WEDGE_ROUNDS ??= '1';
serveMoeInWedgeSuites('qwen3_moe', 'f32');
await import('./wedge_scenarios.test.mjs');
