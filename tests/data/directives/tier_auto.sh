#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/in
#RSA_TIER=Auto
