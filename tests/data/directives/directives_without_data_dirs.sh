#!/bin/bash
#RSA_TIER=ram
#RSA_NODES=1
