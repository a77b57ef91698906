/* SPDX-License-Identifier: MIT */
/* `agentxpu suggestions`: lists the monitor's suggestion store. */
#pragma once

/* argv[0] is "suggestions". Returns the process exit status. */
int cli_suggestions(int argc, char **argv);
