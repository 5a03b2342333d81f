// The run page's strings of a live run (live.js), in English and 简体中文, added to strings.js's.

import { STRINGS } from "./strings.js";

Object.assign(STRINGS.en, {
  live_mark: "● live",
  live_title: "This run is live: a vLLM server's recorder is sending its steps as it schedules them, and the step bar grows as they arrive.",
  live_follow: "Follow",
  live_follow_title: "Keep the newest step in view (choosing a step by hand turns it off)",
  live_ended: "ended",
  live_ended_title: "The live run has closed: every step that arrived is here.",
});

Object.assign(STRINGS.zh, {
  live_mark: "● 实时",
  live_title: "这是一个实时运行：vLLM 服务器的记录器正在逐步发送它调度的每一步，步骤条随之增长。",
  live_follow: "跟随",
  live_follow_title: "始终显示最新的一步（手动选择某一步会关闭跟随）",
  live_ended: "已结束",
  live_ended_title: "实时运行已关闭：收到的每一步都在这里。",
});
