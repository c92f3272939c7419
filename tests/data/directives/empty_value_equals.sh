#!/bin/bash
#RSA_DATA_IN=
#RSA_TIER=  
