#!/bin/bash
#RSA_DATA_OUT=/pfs/out
#RSA_RESET=10ſ
sleep 1
