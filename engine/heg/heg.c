/* SPDX-License-Identifier: MIT */
#include "heg.h"

const char *axp_op_name(axp_op op) {
        static const char *const names[AXP_OP__COUNT] = {
                [AXP_OP_EMBED] = "embed", [AXP_OP_K1] = "K1 qkv", [AXP_OP_K2] = "K2 attn",
                [AXP_OP_K3] = "K3 ffn",   [AXP_OP_HEAD] = "head",
        };
        return op < AXP_OP__COUNT ? names[op] : "?";
}

bool axp_op_tokenwise(axp_op op) {
        return op == AXP_OP_EMBED || op == AXP_OP_K1 || op == AXP_OP_K3;
}
