#!/bin/bash
#RSA_DATA_IN="/gpfs/alice/a	b"
#RSA_DATA_OUT=/gpfs/alice/[0m
